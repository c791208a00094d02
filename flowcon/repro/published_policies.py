"""Policies as the published ElasticFlow simulator (pkusys/ElasticFlow) defines them, for
``flowcon simulate --world published``: re-implemented from its description, no code copied.

- ``EDFPublished``: earliest deadline first, no admission control; each job gets
  ``max_gpu`` GPUs (its largest profiled count, capped at 64 and at its batch size) even
  where its throughput falls there; when fewer are free, the largest power of two that is.
- ``ElasticFlowPublished``: ElasticFlow whose arrivals of one decision are admitted or
  declined together: every hard-deadline job, admitted ones from their current progress
  and the arrivals, is re-planned from scratch in deadline order, and when that fails for
  any of them, all the arrivals are declined (the published simulator's
  ``estimate_all_jobs`` over the runnable jobs and the event's arrivals), with minimum
  shares filled as it fills them (``PublishedLedger``); spare GPUs by the paper's priority
  (GPU time saved, its ``allocate_free_gpus``). No overhead margin in admission (that
  world charges overheads outside the plan).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from flowcon.alloc.admission_steps import _EPS, _Curve, _make_plan, _Plan, _Profile, _Run
from flowcon.alloc.filling import _horizon
from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, deadline_order_key, floor_power_of_two, powers_of_two
from flowcon.alloc.policy import EDFPolicy, ElasticFlowPolicy, _edf_order
from flowcon.alloc.types import AdmissionDecision, ClusterState


def ef_max_gpu(job: Job) -> int:
    """The published ElasticFlow's cap on a job's GPUs (per model and batch size, A100)."""
    m, bs = job.model, job.batch_size
    special = {
        ("gpt2", 128): 16, ("gpt2", 256): 32, ("bert", 64): 8, ("inception3", 64): 16,
        ("inception3", 128): 32, ("resnet50", 64): 32, ("vgg16", 64): 32,
    }  # fmt: skip
    if m == "deepspeech2":
        return max(1, bs)
    if (m, bs) in special:
        return special[(m, bs)]
    if m == "bert":
        return 16
    return max(1, min(bs, 64))


class PublishedLedger(SlotLedger):
    """Minimum satisfactory shares filled the way the published simulator fills them
    (``ef_sim_allocation``): over *periods* between the points where the free GPUs change,
    not slot by slot. For quota j = 1, 2, 4, ... the periods are walked back from the
    deadline at min(j, free) until the work fits; the job then holds j from the start of
    that period on and the previous quota (j / 2) in the periods before it, from now, and
    its reservation ends in the slot where the work is done (early when j is more than
    needed). The shares are front-loaded where ours (``SlotLedger``) are back-loaded."""

    _bounded = False  # the filling always reads the free GPUs

    def _fill(
        self, job: Job, now_k: int, now: float, used: _Profile | None, c: _Curve | None = None
    ) -> _Plan | None:
        assert job.deadline is not None
        assert used is not None  # never left out: _bounded is False
        remaining = job.remaining
        if remaining <= 0:
            return _Plan(now_k, [], [])
        horizon = _horizon(job.deadline, now_k, now, self.origin, self.slot)
        if horizon is None:
            return None
        end_k, _, _, partial = horizon
        part = dict(partial)
        # each period: (start, end, largest power of two <= the free GPUs, its seconds);
        # the partial slots (now_k, end_k - 1) lie in the first and the last period
        total, slot = self.total_gpus, self.slot
        periods: list[_Period] = [
            (a, b, floor_power_of_two(total - v), (b - a) * slot)
            for a, b, v in used.segments(now_k, end_k)
        ]
        for i in {0, len(periods) - 1}:
            a, b, p2, _ = periods[i]
            periods[i] = (a, b, p2, self._secs(a, b, part))
        quotas = powers_of_two(min(total, ef_max_gpu(job)))
        at = job.curve.at
        need = remaining * (1.0 - _EPS)
        prev = 0
        for j in quotas:
            point = _point(periods, j, need, at)
            if point is not None:
                return self._forward(periods, part, j, prev, point, need, at, now_k)
            prev = j
        return None

    def _secs(self, a: int, b: int, part: dict[int, float]) -> float:
        return (b - a) * self.slot + sum(w - self.slot for s, w in part.items() if a <= s < b)

    def _forward(self, periods: list[_Period], part: dict[int, float], j: int, prev: int,
                 point: int, need: float, at: _Speed, now_k: int) -> _Plan:  # fmt: skip
        """The reservation from now: ``prev`` before ``point``, ``j`` from it, until the
        slot where ``need`` iterations are done."""
        runs: list[_Run] = []
        acc = 0.0
        for a, b, p2, secs in periods:
            q = j if a >= point else prev
            n = q if q < p2 else p2  # min(q, floor_power_of_two(free)), 0 when none free
            if n <= 0:
                continue
            tp = at(n)
            got = secs * tp
            if acc + got < need:
                acc += got
                runs.append((a, b, n, tp))
                continue
            # the slot where the work is done: the first k in [a, b - 1) whose slots
            # [a, k + 1) cover it, else b - 1 (bisection; the test is monotone in k)
            lo, hi = a, b - 1
            while lo < hi:
                mid = (lo + hi) // 2
                if acc + self._secs(a, mid + 1, part) * tp < need:
                    lo = mid + 1
                else:
                    hi = mid
            runs.append((a, lo + 1, n, tp))
            break
        return _make_plan(now_k, runs, tuple(sorted(part.items())))


# a period of PublishedLedger._fill: (first slot, end slot, the largest power of two not
# above its free GPUs (0: none free), the seconds it holds)
_Period = tuple[int, int, int, float]
_Speed = Callable[[int], float]  # iterations per second at a GPU count


def _point(periods: list[_Period], j: int, need: float, at: _Speed) -> int | None:
    """Start of the period where quota ``j``, walked back from the deadline, covers
    ``need``; None: it never does."""
    acc = 0.0
    for a, _, p2, secs in reversed(periods):
        n = j if j < p2 else p2  # min(j, free) as a power of two: j is one
        if n <= 0:
            continue
        acc += secs * at(n)
        if acc >= need:
            return a
    return None


def max_gpu(job: Job) -> int:
    """The published baselines' job size: the largest profiled GPU count, at most 64 and
    at most the global batch size (one sample per GPU)."""
    n = max(job.curve.points)
    n = min(n, 64)
    if job.batch_size > 0:
        n = min(n, job.batch_size)
    return max(1, n)


class EDFPublished(EDFPolicy):
    """EDF with the published sizing (``max_gpu``), no admission control."""

    def __init__(self) -> None:
        super().__init__(admission=False, overhead=0.0)
        self.name = "edf"

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        free = state.total_gpus
        out = {jid: 0 for jid in state.jobs}
        for j in _edf_order(list(state.jobs.values())):
            if free <= 0:
                break
            base = min(max_gpu(j), state.total_gpus)
            n = base if free >= base else min(floor_power_of_two(free), 64)
            out[j.job_id] = n
            free -= n
        return out


class ElasticFlowPublished(ElasticFlowPolicy):
    """ElasticFlow admitting each decision's arrivals as one batch (see module)."""

    name = "elasticflow-published"

    def __init__(self, rank: str = "paper") -> None:
        super().__init__(overhead=0.0, rank=rank)

    def _get_ledger(self, state: ClusterState) -> SlotLedger:
        if self._ledger is None:
            self._ledger = PublishedLedger(state.total_gpus, state.slot)
        return self._ledger

    def on_submit_batch(
        self, jobs: Sequence[Job], now: float, state: ClusterState
    ) -> list[AdmissionDecision]:
        """All hard-deadline jobs (admitted ones from their current progress, and the
        arrivals) re-planned from scratch in deadline order; if any fails, every arrival
        is declined and the old plans stay; else the fresh plans replace them."""
        old = self._get_ledger(state)
        fresh = PublishedLedger(state.total_gpus, state.slot, origin=now, overhead=self.overhead)
        everyone: dict[str, Job] = dict(state.jobs)
        everyone.update((j.job_id, j) for j in jobs)
        new = {j.job_id for j in jobs}
        failed: str | None = None
        for j in sorted(everyone.values(), key=deadline_order_key):
            if not j.needs_guarantee or j.remaining <= 0:
                continue
            ok, why = fresh._try(j, everyone, now)
            if not ok:
                failed = why if j.job_id in new else f"admitted job {j.job_id} no longer fits"
                break
        if failed is None:
            self._ledger = fresh
            return [AdmissionDecision(True, None) for _ in jobs]
        self._ledger = old
        reason = f"declined with its batch: {failed}"
        return [
            AdmissionDecision(not j.needs_guarantee, reason if j.needs_guarantee else None)
            for j in jobs
        ]
