"""Admission control by minimum satisfactory share (ElasticFlow Algorithm 1).

Time is cut into scheduling slots. Hard-deadline jobs are planned in deadline order; each one
gets ``x(t) = min(j, free(t))`` GPUs (rounded down to the best power of two) in the slots
before its deadline, filled from the deadline backwards, with ``j = 1, 2, 4, ...`` raised until
the iterations fit. A job is admitted only if every hard-deadline job still fits afterwards.

``SlotLedger`` keeps the plans between decisions so that an arrival only re-plans the jobs
whose deadline is not earlier than the newcomer's (earlier ones cannot be affected: they are
filled first). Plans of earlier jobs may be stale (made when those jobs had more work left),
which only over-reserves; before a rejection the ledger re-plans everything from the current
progress and tries again, so staleness never causes a wrong drop.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from flowcon.alloc.model import Job, powers_of_two

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

_EPS = 1e-9


@dataclass(frozen=True)
class SlotPlan:
    """GPUs reserved for one job per slot; slot k covers [start + k*slot, start + (k+1)*slot)."""

    start: float
    slot: float
    gpus: tuple[int, ...]

    def at(self, t: float) -> int:
        k = int(math.floor((t - self.start) / self.slot + _EPS))
        return self.gpus[k] if 0 <= k < len(self.gpus) else 0


@dataclass(frozen=True)
class AdmissionDecision:
    """``min_share``: GPUs each hard-deadline job needs in the current slot (a_i(0));
    ``plans``: the full per-slot minimum satisfactory share of each of them."""

    admitted: bool
    reason: str | None = None
    min_share: dict[str, int] = field(default_factory=dict)
    plans: dict[str, SlotPlan] = field(default_factory=dict)


@dataclass
class _Curve:
    """Per-job lookup tables over the number of free GPUs 0..G: the throughput the job gets
    and the power-of-two count it actually uses."""

    tp: FloatArray
    gpus: IntArray
    levels: list[int]


@dataclass
class _Plan:
    start: int  # absolute slot index of gpus[0]
    gpus: IntArray
    breaks: list[int]  # absolute slot indices where the reservation changes value
    ahead: FloatArray | None = None  # iterations the plan still provides from slot i on

    def provides(self, k: int) -> float:
        """Iterations the reservation delivers from absolute slot ``k`` to its end."""
        if self.ahead is None or len(self.gpus) == 0:
            return 0.0
        i = max(0, k - self.start)
        return float(self.ahead[i]) if i < len(self.ahead) else 0.0

    def at(self, k: int) -> int:
        i = k - self.start
        return int(self.gpus[i]) if 0 <= i < len(self.gpus) else 0


def _breaks(start: int, gpus: IntArray) -> list[int]:
    if len(gpus) == 0:
        return []
    diff = np.flatnonzero(np.diff(gpus)) + 1
    out = [start] if gpus[0] != 0 else []
    out.extend(int(start + d) for d in diff)
    out.append(start + len(gpus))
    return out


class SlotLedger:
    """Minimum satisfactory shares of the admitted hard-deadline jobs on an absolute slot grid
    (slot k = [origin + k*slot, origin + (k+1)*slot)). Decisions are expected at slot
    boundaries; an off-boundary ``now`` is treated as the start of its slot's remainder."""

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
        self._used: IntArray = np.zeros(1024, dtype=np.int64)
        self._plans: dict[str, _Plan] = {}
        self._order: list[tuple[float, float, str]] = []  # (deadline, submit, id)
        self._curves: dict[str, tuple[object, int, _Curve]] = {}
        self._deadline: dict[str, float] = {}

    # -- grid -----------------------------------------------------------------------------
    def slot_index(self, t: float) -> int:
        return int(math.floor((t - self.origin) / self.slot + _EPS))

    def _ensure(self, n: int) -> None:
        if n > len(self._used):
            grown = np.zeros(max(n, 2 * len(self._used)), dtype=np.int64)
            grown[: len(self._used)] = self._used
            self._used = grown

    # -- curves ---------------------------------------------------------------------------
    def _curve(self, job: Job) -> _Curve:
        cap = job.gpu_cap(self.total_gpus)
        cached = self._curves.get(job.job_id)
        if cached is not None and cached[0] is job.curve and cached[1] == cap:
            return cached[2]
        g = self.total_gpus
        tp = np.zeros(g + 1, dtype=np.float64)
        use = np.zeros(g + 1, dtype=np.int64)
        best_n, best_t = 0, 0.0
        levels: list[int] = []
        prev = 0
        counts = powers_of_two(cap) if self.power_of_two else list(range(1, cap + 1))
        for n in [*counts, g + 1]:
            tp[prev:n] = best_t
            use[prev:n] = best_n
            if n > g:
                break
            t = job.curve.at(n)
            if t > best_t * (1.0 + 1e-12):
                best_n, best_t = n, t
                levels.append(n)
            prev = n
        tp[prev:] = best_t
        use[prev:] = best_n
        c = _Curve(tp, use, levels)
        self._curves[job.job_id] = (job.curve, cap, c)
        return c

    # -- progressive filling --------------------------------------------------------------
    def _fill(self, job: Job, now_k: int, now: float, free: IntArray) -> _Plan | None:
        """Algorithm 1's ProgressiveFilling for one job against ``free`` (not modified)."""
        assert job.deadline is not None
        remaining = job.remaining
        if remaining <= 0:
            return _Plan(now_k, np.zeros(0, dtype=np.int64), [])
        end_exact = (job.deadline - self.origin) / self.slot
        end_k = int(math.ceil(end_exact - _EPS))
        if end_k <= now_k:
            return None
        n = end_k - now_k
        if len(free) < end_k:
            raise ValueError("free profile shorter than the deadline horizon")
        w = np.full(n, self.slot, dtype=np.float64)
        w[-1] = min(self.slot, (end_exact - (end_k - 1)) * self.slot)
        w[0] -= max(0.0, now - (self.origin + now_k * self.slot))
        f = free[now_k:end_k]
        c = self._curve(job)
        if not c.levels:
            return None
        need = remaining * (1.0 - _EPS)

        def gain(j: int) -> tuple[FloatArray, IntArray]:
            x = np.minimum(f, j)
            return c.tp[x] * w, x

        lo, hi = 0, len(c.levels) - 1
        it, x = gain(c.levels[hi])
        if float(it.sum()) < need + 2 * self.overhead * c.tp[c.levels[hi]]:
            return None
        best = (it, x)
        while lo < hi:  # smallest level that satisfies the job (sum is monotone in j)
            mid = (lo + hi) // 2
            it_m, x_m = gain(c.levels[mid])
            if float(it_m.sum()) >= need + 2 * self.overhead * c.tp[c.levels[mid]]:
                hi, best = mid, (it_m, x_m)
            else:
                lo = mid + 1
        it, x = best
        lvl_extra = 2 * self.overhead * c.tp[c.levels[hi]]
        back = np.cumsum(it[::-1])
        k = int(np.searchsorted(back, need + lvl_extra))
        k = min(k, n - 1)
        gpus = np.zeros(n, dtype=np.int64)
        gpus[n - 1 - k :] = c.gpus[x[n - 1 - k :]]
        # The earliest reserved slot is usually only partly needed: keep the smallest count
        # that still covers the residual work instead of the full x(t).
        b = n - 1 - k
        residual = need + lvl_extra - (float(back[k - 1]) if k > 0 else 0.0)
        for lv in c.levels:
            if lv > gpus[b]:
                break
            if c.tp[lv] * w[b] >= residual:
                gpus[b] = lv
                break
        first = int(np.flatnonzero(gpus)[0]) if gpus.any() else n
        gpus = gpus[first:]
        start = now_k + first
        ahead = np.cumsum((c.tp[gpus] * w[first:])[::-1])[::-1]
        return _Plan(start, gpus, _breaks(start, gpus), ahead)

    def _apply(self, plan: _Plan, sign: int, used: IntArray) -> None:
        if len(plan.gpus):
            used[plan.start : plan.start + len(plan.gpus)] += sign * plan.gpus

    # -- public API -------------------------------------------------------------------------
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
        self._apply(plan, -1, self._used)
        d = self._deadline.pop(job_id)
        self._order.remove(self._key(job_id, d))
        self._curves.pop(job_id, None)

    def _key(self, job_id: str, deadline: float) -> tuple[float, float, str]:
        for key in self._order[bisect.bisect_left(self._order, (deadline,)) :]:
            if key[2] == job_id:
                return key
        raise KeyError(job_id)

    def try_admit(self, job: Job, jobs: Mapping[str, Job], now: float) -> AdmissionDecision:
        """Admit ``job`` if all hard-deadline jobs (those in the ledger plus it) stay
        satisfiable; on success the new plans are committed. ``jobs`` maps the ids in the
        ledger to their current state (progress)."""
        if not job.needs_guarantee:
            return AdmissionDecision(True, None)
        assert job.deadline is not None
        if job.job_id in self._plans:
            self.remove(job.job_id)
        ok, reason = self._try(job, jobs, now)
        # Plans of earlier-deadline jobs may be stale and over-reserve: re-plan all of them
        # from their current progress before giving up.
        if not ok and not self.replan(jobs, now, lossless=True):
            ok, reason = self._try(job, jobs, now)
        if not ok:
            return AdmissionDecision(False, reason)
        return AdmissionDecision(True, None)

    def _try(self, job: Job, jobs: Mapping[str, Job], now: float) -> tuple[bool, str | None]:
        assert job.deadline is not None
        now_k = self.slot_index(now)
        self._ensure(self.slot_index(job.deadline) + 2)
        key = (job.deadline, job.submit_time, job.job_id)
        pos = bisect.bisect_left(self._order, key)
        suffix = [k[2] for k in self._order[pos:]]
        free = self.total_gpus - self._used
        for jid in suffix:  # give back the later jobs' reservations, then re-plan them
            p = self._plans[jid]
            free[p.start : p.start + len(p.gpus)] += p.gpus
        new_plans: dict[str, _Plan] = {}
        for jid, j in [(job.job_id, job), *((s, jobs[s]) for s in suffix)]:
            plan = self._fill(j, now_k, now, free)
            if plan is None:
                if jid == job.job_id:
                    return False, self._why(job, now)
                return False, f"would violate the deadline of admitted job {jid}"
            if len(plan.gpus):
                free[plan.start : plan.start + len(plan.gpus)] -= plan.gpus
            new_plans[jid] = plan
        for jid in suffix:
            self._apply(self._plans[jid], -1, self._used)
        for jid, plan in new_plans.items():
            self._apply(plan, +1, self._used)
            self._plans[jid] = plan
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
        now_k = self.slot_index(now)
        if self._order:
            self._ensure(self.slot_index(self._order[-1][0]) + 2)
        lost: list[str] = []
        free = np.full(len(self._used), self.total_gpus, dtype=np.int64)
        fresh: dict[str, _Plan] = {}
        for _, _, jid in self._order:
            job = jobs.get(jid)
            plan = self._fill(job, now_k, now, free) if job is not None else None
            if plan is None:
                lost.append(jid)
                if lossless:
                    return lost
                continue
            if len(plan.gpus):
                free[plan.start : plan.start + len(plan.gpus)] -= plan.gpus
            fresh[jid] = plan
        self._used = self.total_gpus - free
        self._plans.update(fresh)
        for jid in lost:
            self._plans[jid] = _Plan(now_k, np.zeros(0, dtype=np.int64), [])
            self.remove(jid)
        return lost

    def refresh(self, job_ids: Iterable[str], jobs: Mapping[str, Job], now: float) -> list[str]:
        """Re-plan single jobs against everybody else's reservations (e.g. a job that fell
        behind its plan by rescale overheads). A job that does not fit keeps its old plan;
        those are returned."""
        now_k = self.slot_index(now)
        failed: list[str] = []
        for jid in job_ids:
            old = self._plans.get(jid)
            job = jobs.get(jid)
            if old is None or job is None:
                continue
            self._apply(old, -1, self._used)
            plan = self._fill(job, now_k, now, self.total_gpus - self._used)
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
        out = []
        for jid, p in self._plans.items():
            j = jobs.get(jid)
            if j is None or not len(p.gpus):
                continue
            margin = self.overhead * j.curve.at(int(p.gpus.max()))
            if j.remaining + margin > p.provides(k) * (1.0 + 1e-9):
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

    def plans(self) -> dict[str, SlotPlan]:
        return {
            jid: SlotPlan(
                self.origin + p.start * self.slot, self.slot, tuple(int(v) for v in p.gpus)
            )
            for jid, p in self._plans.items()
        }

    def used_profile(self, now: float, slots: int) -> list[int]:
        k = self.slot_index(now)
        self._ensure(k + slots)
        return [int(v) for v in self._used[k : k + slots]]


def admit(
    job: Job,
    admitted: Sequence[Job],
    now: float,
    total_gpus: int,
    slot: float,
    *,
    power_of_two: bool = True,
) -> AdmissionDecision:
    """Algorithm 1 from scratch: would ``job`` and all hard-deadline ``admitted`` jobs (with
    their current progress) meet their deadlines? The slot grid starts at ``now``.
    ``power_of_two=False`` allows any GPU count (used to check Theorem 1).

    Admitted jobs that are already unsatisfiable on their own are not held against the
    newcomer (they have lost their guarantee). The decision carries every job's plan.
    """
    ledger = SlotLedger(total_gpus, slot, origin=now, power_of_two=power_of_two)
    by_id = {j.job_id: j for j in admitted if j.needs_guarantee and j.remaining > 0}
    for j in sorted(by_id.values(), key=lambda j: (j.deadline, j.submit_time, j.job_id)):
        ledger._try(j, by_id, now)  # builds the existing plans in deadline order
    by_id_all = dict(by_id)
    by_id_all[job.job_id] = job
    decision = ledger.try_admit(job, by_id_all, now)
    return AdmissionDecision(decision.admitted, decision.reason, ledger.shares(now), ledger.plans())


def deadline_order(jobs: Iterable[Job]) -> list[Job]:
    return sorted(
        jobs, key=lambda j: (math.inf if j.deadline is None else j.deadline, j.submit_time)
    )
