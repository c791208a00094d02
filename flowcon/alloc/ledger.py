"""``SlotLedger``: the minimum satisfactory shares of the admitted hard-deadline jobs, kept
between decisions (ElasticFlow Algorithm 1; the model is described in
flowcon/alloc/admission.py). Plans and the reserved profile are step functions
(flowcon/alloc/admission_steps.py), filled by flowcon/alloc/filling.py. Pure, no I/O.
"""

from __future__ import annotations

import bisect
import copy
import math
from collections.abc import Callable, Iterable, Mapping

from flowcon.alloc.admission_steps import _EPS, _Curve, _make_plan, _Plan, _Profile
from flowcon.alloc.filling import (
    _free_runs,
    _horizon,
    _level_seconds,
    _reserve_forward,
    _rise,
    _Seg,
    _segments,
    _smallest_level,
    _smallest_level_one,
)
from flowcon.alloc.model import Job, ThroughputCurve, powers_of_two
from flowcon.alloc.types import AdmissionDecision, SlotPlan

# SlotLedger.finish_probe: (remaining work, from time) -> GPU-seconds to finish, None: no plan
FinishProbe = Callable[[float, float], float | None]

# (now, remaining, deadline, curve, free runs (None: one at the curve's by_used[0]), the
# plan made from them)
_Memo = tuple[float, float, float, _Curve, tuple[list[int], list[int]] | None, _Plan | None]


# SlotLedger._replan_key: (now, overhead, per job in deadline order: None where ``jobs``
# lacks it, else (id, remaining work, deadline, curve, GPU limit))
_ReplanKey = tuple[
    float, float, tuple[tuple[str, float, float | None, ThroughputCurve, int | None] | None, ...]
]


class SlotLedger:
    """Minimum satisfactory shares of the admitted hard-deadline jobs on an absolute slot grid
    (slot k = [origin + k*slot, origin + (k+1)*slot)). Decisions are expected at slot
    boundaries; an off-boundary ``now`` is treated as the start of its slot's remainder."""

    # ``_try`` may fill a job without its profile where a bound shows ``_fill``'s shortcut
    # (a subclass whose filling reads the profile otherwise sets this False)
    _bounded = True

    def __init__(
        self,
        total_gpus: int,
        slot: float,
        origin: float = 0.0,
        overhead: float = 0.0,
        power_of_two: bool = True,
    ) -> None:
        if total_gpus < 1 or slot <= 0:
            raise ValueError("need total_gpus >= 1 and slot > 0")
        self.total_gpus = total_gpus
        self.slot = float(slot)
        self.origin = float(origin)
        self.overhead = float(overhead)
        self.power_of_two = power_of_two
        self._used = _Profile()
        self._floor = -(2**62)  # slots before this are forgotten by _used
        self._plans: dict[str, _Plan] = {}
        self._order: list[tuple[float, float, str]] = []  # (deadline, submit, id)
        self._curves: dict[tuple[int, int], tuple[object, _Curve]] = {}
        self._deadline: dict[str, float] = {}
        # job id -> (now, remaining, deadline, curve, free runs, plan) of its last filling
        self._memo: dict[str, _Memo] = {}
        self._job_curves: dict[str, tuple[ThroughputCurve, int | None, _Curve]] = {}
        # the inputs of the last lossless ``replan`` and what it returned, while nothing has
        # changed the plans since (then the same inputs give the same plans: skipped)
        self._fixed: tuple[_ReplanKey, tuple[str, ...]] | None = None

    # -- grid -----------------------------------------------------------------------------
    def slot_index(self, t: float) -> int:
        return int(math.floor((t - self.origin) / self.slot + _EPS))

    def _advance(self, now_k: int) -> None:
        """Forget reservations before ``now_k``; rebuild exactly if time went backwards."""
        if now_k < self._floor:
            self._used = _Profile()
            self._floor = -(2**62)
            for p in self._plans.values():
                self._apply(p, +1, self._used)
        if now_k != self._floor:
            self._used.forget_before(now_k)
            self._floor = now_k

    # -- curves ---------------------------------------------------------------------------
    def _curve(self, job: Job) -> _Curve:
        # the job's own last answer while its curve and GPU limit are the ones it was for
        mine = self._job_curves.get(job.job_id)
        if mine is not None and mine[0] is job.curve and mine[1] == job.max_gpus:
            return mine[2]
        c = self._curve_of(job)
        self._job_curves[job.job_id] = (job.curve, job.max_gpus, c)
        return c

    def _curve_of(self, job: Job) -> _Curve:
        cap = job.gpu_cap(self.total_gpus)
        key = (id(job.curve), cap)
        cached = self._curves.get(key)
        if cached is not None and cached[0] is job.curve:
            return cached[1]
        levels: list[int] = []
        tps: list[float] = []
        best_t = 0.0
        counts = powers_of_two(cap) if self.power_of_two else range(1, cap + 1)
        for n in counts:
            t = job.curve.at(n)
            if t > best_t * (1.0 + 1e-12):
                best_t = t
                levels.append(n)
                tps.append(t)
        # by_used[v]: level index bought with v GPUs reserved (free = total - v); over-full
        # slots (v > total) buy nothing
        g = self.total_gpus
        by_used = [-1] * (2 * g + 2)
        for i, n in enumerate(levels):
            top = levels[i + 1] - 1 if i + 1 < len(levels) else g  # free counts n..top
            by_used[g - top : g - n + 1] = [i] * (top - n + 1)
        thr = 0
        while thr + 1 < len(by_used) and by_used[thr + 1] == by_used[0]:
            thr += 1
        c = _Curve(levels, tps, by_used, thr)
        # curves are shared by the jobs of one model and batch size: cache per curve
        if len(self._curves) > 4096:  # refined curves of a long-lived ledger
            self._curves.clear()
        self._curves[key] = (job.curve, c)
        return c

    # -- progressive filling --------------------------------------------------------------
    def _fill(
        self, job: Job, now_k: int, now: float, used: _Profile | None, c: _Curve | None = None
    ) -> _Plan | None:
        """Algorithm 1's ProgressiveFilling for one job against ``used`` (not modified;
        None: the caller knows that no slot holds more than the curve's ``thr``); ``c``:
        the job's ``_curve`` where the caller has it.

        The steps: the horizon and its partial first/last slots (``_horizon``); the free
        profile as runs of the curve level it can buy (``_free_runs``, ``_segments``); the
        smallest cap ``j`` whose gain covers the work (``_smallest_level``, lines 13-19);
        the reservation at that cap from now on (``_reserve_forward``).
        ``flowcon.repro.paper_reference.progressive_filling_reference`` is the same thing slot by
        slot, line by line, and the tests hold the two equal."""
        assert job.deadline is not None
        remaining = job.remaining
        if remaining <= 0:
            return _Plan(now_k, [], [])
        if c is None:
            c = self._curve(job)
        if not c.levels:
            return None
        # the free runs: one at by_used[0] over the whole horizon when no slot holds more
        # than c.thr reserved GPUs (the usual case; O(1) with the profile's bounds), None
        # below; else step by step (``_free_runs``)
        free: tuple[list[int], list[int]] | None = None
        horizon = None
        if used is not None and not used.fits(c.thr):
            horizon = _horizon(job.deadline, now_k, now, self.origin, self.slot)
            if horizon is None:
                return None
            starts, levs = _free_runs(c.by_used, used, now_k, horizon[0])
            if len(levs) > 1 or levs[0] != c.by_used[0]:
                free = (starts, levs)
        # the rest is a function of (deadline, now, remaining, curve, free runs) and the
        # ledger's constants: the same inputs as this job's previous filling give its plan
        # (a plan is only remembered when the horizon has a slot, so a hit implies one)
        memo = self._memo.get(job.job_id)
        if (
            memo is not None
            and memo[0] == now
            and memo[1] == remaining
            and memo[2] == job.deadline
            and memo[3] is c
            and memo[4] == free
        ):
            return memo[5]
        if horizon is None:
            horizon = _horizon(job.deadline, now_k, now, self.origin, self.slot)
            if horizon is None:
                return None
        if free is None:
            plan = self._plan_one_level(remaining, c, horizon, now_k)
        else:
            plan = self._plan_runs(remaining, c, horizon, now_k, *free)
        self._memo[job.job_id] = (now, remaining, job.deadline, c, free, plan)
        return plan

    def _plan_runs(
        self,
        remaining: float,
        c: _Curve,
        horizon: tuple[int, float, float, tuple[tuple[int, float], ...]],
        now_k: int,
        starts: list[int],
        levs: list[int],
    ) -> _Plan | None:
        """``_fill`` after the free runs: lines 13-19 and the reservation."""
        end_k, w_first, w_last, partial = horizon
        segs = _segments(starts, levs, now_k, end_k, w_first, w_last, self.slot)
        tps = c.tps
        secs = _level_seconds(segs, len(c.levels))
        need = remaining * (1.0 - _EPS)
        extra = 2 * self.overhead
        hi = _smallest_level(tps, secs, need, extra)
        if hi is None:
            return None
        target = need + extra * tps[hi]
        return _make_plan(now_k, _reserve_forward(segs, c.levels, tps, hi, target), partial)

    def _plan_one_level(
        self,
        remaining: float,
        c: _Curve,
        horizon: tuple[int, float, float, tuple[tuple[int, float], ...]],
        now_k: int,
    ) -> _Plan | None:
        """``_plan_runs`` for free runs of one level, ``c.by_used[0]``, over the whole
        horizon (the usual case): the same segments, seconds and bisection written out for
        that case, then the same reservation. The tests hold it equal to ``_plan_runs``."""
        end_k, w_first, w_last, partial = horizon
        li = c.by_used[0]
        if li < 0:
            return None  # no level at all: no gain (``_smallest_level`` says None)
        slot = self.slot
        # _segments and _level_seconds for starts [now_k, end_k], levs [li]
        segs: list[_Seg] = [(now_k, now_k + 1, li, w_first)]
        s0 = 0.0 + w_first * 1
        if end_k - now_k > 1:
            if end_k - 1 > now_k + 1:
                segs.append((now_k + 1, end_k - 1, li, slot))
                s0 += slot * (end_k - 1 - (now_k + 1))
            segs.append((end_k - 1, end_k, li, w_last))
            s0 += w_last * 1
        if not s0:
            return None  # no seconds: no gain
        tps = c.tps
        need = remaining * (1.0 - _EPS)
        extra = 2 * self.overhead
        hi = _smallest_level_one(tps, li, s0, need, extra)  # nz = [(li, s0)]
        if hi is None:
            return None
        target = need + extra * tps[hi]
        return _make_plan(now_k, _reserve_forward(segs, c.levels, tps, hi, target), partial)

    def _sum_of(self, plans: Iterable[_Plan]) -> _Profile:
        """The reserved GPUs of ``plans`` from the floor on, as ``_apply`` would add them
        to an empty profile (equal slot for slot from the floor on; one sweep)."""
        out = _Profile()
        out.add_all(((plan.runs, +1) for plan in plans), self._floor)
        return out

    def _apply(self, plan: _Plan, sign: int, used: _Profile) -> None:
        used.add_runs(plan.runs, self._floor, sign)

    # -- public API -------------------------------------------------------------------------
    def snapshot(self) -> SlotLedger:
        """An independent copy of the reservations (the curve cache is shared): to try a
        batch of admissions and go back if one fails."""
        other = copy.copy(self)
        other._used = self._used.copy()
        other._plans = dict(self._plans)  # plans are replaced, never changed in place
        other._order = list(self._order)
        other._deadline = dict(self._deadline)
        other._memo = dict(self._memo)
        other._job_curves = dict(self._job_curves)
        return other

    def gpu_seconds_to_finish(self, job: Job, remaining: float, from_t: float) -> float | None:
        """GPU-seconds of the minimum satisfactory plan that would finish ``remaining``
        iterations of ``job`` from ``from_t`` on (a slot boundary) next to everybody else's
        reservations, its own given back (Algorithm 2's re-run of progressive filling);
        None: no plan meets its deadline."""
        return self.finish_probe(job)(remaining, from_t)

    def finish_probe(self, job: Job) -> FinishProbe:
        """``gpu_seconds_to_finish`` for one job, to be asked for several amounts of work:
        its own reservation is given back once, not at every question. Valid while the
        ledger does not change (Algorithm 2's loop asks between two decisions)."""
        work: _Profile | None = None

        def gpu_seconds(remaining: float, from_t: float) -> float | None:
            nonlocal work
            if remaining <= 0:
                return 0.0
            if job.deadline is None:
                return None
            if work is None:
                work = self._used
                own = self._plans.get(job.job_id)
                if own is not None:
                    work = work.copy()
                    self._apply(own, -1, work)
            probe = copy.copy(job)
            probe.done_iterations = job.iterations - remaining
            plan = self._fill(probe, self.slot_index(from_t), from_t, work)
            if plan is None:
                return None
            total = 0.0
            part = dict(plan.partial)
            for a, b, g, _ in plan.runs:
                secs = (b - a) * self.slot
                for s_, w in part.items():
                    if a <= s_ < b:
                        secs += w - self.slot
                total += g * secs
            return total

        return gpu_seconds

    def __contains__(self, job_id: object) -> bool:
        return job_id in self._plans

    def __len__(self) -> int:
        return len(self._plans)

    def jobs(self) -> list[str]:
        return [jid for _, _, jid in self._order]

    def remove(self, job_id: str) -> None:
        plan = self._plans.pop(job_id, None)
        if plan is None:
            return
        self._fixed = None
        self._apply(plan, -1, self._used)
        d = self._deadline.pop(job_id)
        self._memo.pop(job_id, None)
        self._job_curves.pop(job_id, None)
        self._order.remove(self._key(job_id, d))

    def _key(self, job_id: str, deadline: float) -> tuple[float, float, str]:
        for key in self._order[bisect.bisect_left(self._order, (deadline,)) :]:
            if key[2] == job_id:
                return key
        raise KeyError(job_id)

    def try_admit(self, job: Job, jobs: Mapping[str, Job], now: float) -> AdmissionDecision:
        """Admit ``job`` if all hard-deadline jobs (those in the ledger plus it) stay
        satisfiable; on success the new plans are committed. ``jobs`` maps the ids in the
        ledger to their current state (progress).

        Beyond the paper: when ``job`` does not fit and the ledger's own jobs cannot all be
        re-planned either (without ``job``), the jobs behind their reservation that no plan
        brings to their deadline any more (``stuck``) lose their guarantee: they leave the
        ledger (and keep running on spare GPUs), ``job`` is tried once more, and the
        decision names them in ``revoked``. Their guarantee is broken whatever is decided
        about ``job``; held, their stale reservations would decline every later arrival
        that needs the room (on cluster02, published world, one such job declined 114)."""
        if not job.needs_guarantee:
            return AdmissionDecision(True, None)
        assert job.deadline is not None
        if job.job_id in self._plans:
            self.remove(job.job_id)
        revoked: tuple[str, ...] = ()
        ok, reason = self._try(job, jobs, now)
        # Plans of earlier-deadline jobs may be stale and over-reserve: re-plan all of them
        # from their current progress before giving up.
        if not ok:
            lost, changed = self._replan(jobs, now, lossless=True)
            if not lost:
                if changed:  # else the plans the try failed against: it fails the same way
                    ok, reason = self._try(job, jobs, now)
            else:
                revoked = tuple(self.stuck(jobs, now))
                for jid in revoked:
                    self.remove(jid)
                if revoked:
                    self.replan(jobs, now, lossless=True)
                    ok, reason = self._try(job, jobs, now)
        if not ok:
            return AdmissionDecision(False, reason, revoked=revoked)
        return AdmissionDecision(True, None, revoked=revoked)

    def stuck(self, jobs: Mapping[str, Job], now: float) -> list[str]:
        """Ledger jobs behind their reservation (``behind``) that cannot be re-planned next
        to everybody else's reservations either (``refresh``; the others among the behind
        jobs get their fresh plan on the way)."""
        return self.refresh(self.behind(jobs, now), jobs, now)

    def _try(self, job: Job, jobs: Mapping[str, Job], now: float) -> tuple[bool, str | None]:
        assert job.deadline is not None
        now_k = self.slot_index(now)
        self._advance(now_k)
        key = (job.deadline, job.submit_time, job.job_id)
        pos = bisect.bisect_left(self._order, key)
        suffix = [k[2] for k in self._order[pos:]]
        order = [(job.job_id, job), *((s, jobs[s]) for s in suffix)]
        old, floor = self._plans, self._floor
        new_plans: dict[str, _Plan] = {}
        # Each job is filled against the earlier jobs' plans, the newcomer's and the later
        # jobs' new ones before it. While ``bound`` caps every such profile at or below the
        # job's thr, its filling reads nothing of the profile (``_fill`` with None): the
        # profile is at most the current reservations (``_used``, every old plan in it)
        # plus the newcomer's peak plus, for each later job re-planned so far, the most its
        # new plan reserves above its old one (``_rise``; 0 in the usual case), and never
        # negative (a sum of plans). Once the bound is not enough, the profile is built
        # exactly and kept up to date plan by plan (``_apply``).
        bound = self._used.ceiling() if self._bounded else None
        work: _Profile | None = None
        for n, (jid, j) in enumerate(order):
            c = self._curve(j)
            if work is None and (bound is None or bound > c.thr):
                work = self._sum_of([old[k[2]] for k in self._order[:pos]] + [*new_plans.values()])
            plan = self._fill(j, now_k, now, work, c)
            if plan is None:
                if jid == job.job_id:
                    return False, self._why(job, now)
                return False, f"would violate the deadline of admitted job {jid}"
            new_plans[jid] = plan
            if work is not None:
                self._apply(plan, +1, work)
            elif bound is not None:
                bound += _rise(plan, old[jid], floor) if n else plan.peak
        if work is None:
            # the same profile as filling them one by one: the current one with the
            # newcomer's plan added and every changed plan in place of the old one
            work = self._used
            changes = [(new_plans[job.job_id].runs, +1)]
            for jid in suffix:
                if new_plans[jid] is not old[jid]:
                    changes += [(old[jid].runs, -1), (new_plans[jid].runs, +1)]
            work.add_all(changes, floor)
        self._used = work
        self._plans.update(new_plans)
        self._fixed = None
        self._order.insert(pos, key)
        self._deadline[job.job_id] = job.deadline
        return True, None

    def _why(self, job: Job, now: float) -> str:
        assert job.deadline is not None
        cap = job.gpu_cap(self.total_gpus)
        alone = job.curve.at(cap) * max(0.0, job.deadline - now)
        if alone < job.remaining:
            return (
                f"deadline unsatisfiable even alone: {job.remaining:.0f} iterations need "
                f"{job.remaining / max(job.curve.at(cap), 1e-12):.0f} s on {cap} GPUs, "
                f"{max(0.0, job.deadline - now):.0f} s left"
            )
        return "not enough GPU time before the deadline next to the admitted jobs"

    def replan(self, jobs: Mapping[str, Job], now: float, *, lossless: bool = False) -> list[str]:
        """Re-run Algorithm 1 over all ledger jobs from their current progress (tightens stale
        plans). Progressive filling is greedy, so a fresh plan can fail where the old one
        still holds: with ``lossless=True`` nothing changes unless every job fits again.
        Otherwise jobs that no longer fit (e.g. after a measured slowdown) lose their
        guarantee and are returned; they keep running on spare GPUs."""
        return self._replan(jobs, now, lossless=lossless)[0]

    def _replan_key(self, jobs: Mapping[str, Job], now: float) -> _ReplanKey:
        """What a re-plan's plans are made of besides the ledger's constants: the instant,
        the overhead, the jobs in deadline order and what their filling reads of each."""
        sig: list[tuple[str, float, float | None, ThroughputCurve, int | None] | None] = []
        for _, _, jid in self._order:
            j = jobs.get(jid)
            sig.append(None if j is None else (jid, j.remaining, j.deadline, j.curve, j.max_gpus))
        return now, self.overhead, tuple(sig)

    def _replan(
        self, jobs: Mapping[str, Job], now: float, *, lossless: bool
    ) -> tuple[list[str], bool]:
        """``replan`` and whether any plan changed. The fresh plans are a function of
        ``_replan_key`` alone (each job is filled against the fresh plans before it, never
        against the old ones), so a lossless re-plan with the same key as the last one,
        nothing changed since, gives that one's answer and changes nothing."""
        key = self._replan_key(jobs, now) if lossless else None
        fixed = self._fixed
        if key is not None and fixed is not None and fixed[0] == key:
            return list(fixed[1]), False
        now_k = self.slot_index(now)
        self._advance(now_k)
        lost: list[str] = []
        fresh: dict[str, _Plan] = {}
        # as in ``_try``: the fresh plans before a job are at most the current reservations
        # plus what each fresh plan reserves above its old one; while that bound shows the
        # job's shortcut its profile is not built
        bound = self._used.ceiling() if self._bounded else None
        work: _Profile | None = None
        for _, _, jid in self._order:
            job = jobs.get(jid)
            plan = None
            if job is not None:
                c = self._curve(job)
                if work is None and (bound is None or bound > c.thr):
                    work = self._sum_of(fresh.values())
                plan = self._fill(job, now_k, now, work, c)
            if plan is None:
                lost.append(jid)
                if key is not None:  # lossless: nothing changes
                    self._fixed = (key, tuple(lost))
                    return lost, False
                continue
            if work is not None:
                self._apply(plan, +1, work)
            elif bound is not None:
                bound += _rise(plan, self._plans[jid], self._floor)
            fresh[jid] = plan
        changed = any(p is not self._plans.get(jid) for jid, p in fresh.items())
        self._used = work if work is not None else self._sum_of(fresh.values())
        self._plans.update(fresh)
        for jid in lost:
            self._plans[jid] = _Plan(now_k, [], [])
            self.remove(jid)
        self._fixed = None if key is None else (key, ())
        return lost, changed or bool(lost)

    def refresh(self, job_ids: Iterable[str], jobs: Mapping[str, Job], now: float) -> list[str]:
        """Re-plan single jobs against everybody else's reservations (e.g. a job that fell
        behind its plan by rescale overheads). A job that does not fit keeps its old plan;
        those are returned."""
        now_k = self.slot_index(now)
        self._advance(now_k)
        self._fixed = None
        failed: list[str] = []
        for jid in job_ids:
            old = self._plans.get(jid)
            job = jobs.get(jid)
            if old is None or job is None:
                continue
            self._apply(old, -1, self._used)
            plan = self._fill(job, now_k, now, self._used)
            if plan is None:
                failed.append(jid)
                plan = old
            self._apply(plan, +1, self._used)
            self._plans[jid] = plan
        return failed

    def behind(self, jobs: Mapping[str, Job], now: float) -> list[str]:
        """Ledger jobs whose reservation no longer covers their remaining work (rescale
        overheads, slower-than-profiled speed): the caller should ``refresh`` them."""
        k = self.slot_index(now)
        slot, overhead = self.slot, self.overhead
        out = []
        for jid, p in self._plans.items():
            j = jobs.get(jid)
            if j is None or not p.runs:
                continue
            # the margin and the limit are the same numbers each time while the job's curve,
            # the overhead and the slot are, and the plan has not started (cached on it)
            c = p._behind
            if c is None or c[0] is not j.curve or c[1] != overhead or c[2] != slot:
                margin = overhead * j.curve.at(p.peak)
                whole = p.provides(p.runs[0][0], slot) * (1.0 + 1e-9)
                c = p._behind = (j.curve, overhead, slot, margin, whole)
            limit = c[4] if k <= p.runs[0][0] else p.provides(k, slot) * (1.0 + 1e-9)
            if j.remaining + c[3] > limit:
                out.append(jid)
        return out

    def share(self, job_id: str, now: float) -> int:
        """a_i(0): the job's minimum satisfactory share in the slot containing ``now``."""
        plan = self._plans.get(job_id)
        return plan.at(self.slot_index(now)) if plan is not None else 0

    def shares(self, now: float) -> dict[str, int]:
        k = self.slot_index(now)
        return {jid: p.at(k) for jid, p in self._plans.items()}

    def next_change(self, now: float) -> float | None:
        """Earliest slot boundary after ``now`` where some reservation changes value."""
        k = self.slot_index(now)
        best: int | None = None
        for p in self._plans.values():
            i = bisect.bisect_right(p.breaks, k)
            if i < len(p.breaks) and (best is None or p.breaks[i] < best):
                best = p.breaks[i]
        return None if best is None else self.origin + best * self.slot

    def plan_of(self, job_id: str) -> SlotPlan | None:
        """One job's reservation per slot (None: not in the ledger)."""
        p = self._plans.get(job_id)
        return (
            None if p is None else SlotPlan(self.origin + p.start * self.slot, self.slot, p.gpus())
        )

    def plans(self) -> dict[str, SlotPlan]:
        return {
            jid: SlotPlan(self.origin + p.start * self.slot, self.slot, p.gpus())
            for jid, p in self._plans.items()
        }

    def used_profile(self, now: float, slots: int) -> list[int]:
        k = self.slot_index(now)
        if k < self._floor:
            self._advance(k)
        out: list[int] = []
        for a, b, v in self._used.segments(k, k + slots):
            out.extend([v] * (b - a))
        return out
