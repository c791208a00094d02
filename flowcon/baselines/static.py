"""The non-elastic baselines (Gandiva, Tiresias as ElasticFlow's evaluation runs them) and
the pieces other baselines build on: the trivial driver hooks and the static GPU count.
Chosen by name in flowcon/policy_registry.py, like every policy."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence

from flowcon.alloc.model import Job, floor_power_of_two
from flowcon.alloc.types import AdmissionDecision, ClusterState


class Stateless:
    """Trivial driver hooks for policies that keep no state between decisions."""

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        return None

    def restore(self, now: float, state: ClusterState) -> None:
        return None

    def on_curve_change(self, job_id: str, now: float, state: ClusterState) -> None:
        return None

    def set_overhead(self, seconds: float) -> None:
        return None


def static_gpus(job: Job, total_gpus: int) -> int:
    """The non-elastic baselines' fixed size: the requested count as a power of two."""
    n = max(1, job.requested_gpus)
    n = 1 << (n - 1).bit_length()
    return min(n, floor_power_of_two(total_gpus))


def fill_static(
    order: Iterable[Job], total_gpus: int, free: int, out: dict[str, int]
) -> dict[str, int]:
    """Non-elastic baselines: each job in ``order`` gets its static size if it still fits
    in ``free`` GPUs, else 0 (it waits); a later, smaller job may still fit (backfill)."""
    for job in order:
        n = static_gpus(job, total_gpus)
        if n <= free:
            out[job.job_id] = n
            free -= n
        else:
            out[job.job_id] = 0
    return out


class GandivaPolicy(Stateless):
    """Non-elastic, deadline-unaware: each job runs on the GPUs it asked for, started in
    arrival order (a later job that fits may start while an earlier one waits), never
    preempted."""

    name = "gandiva"

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        return AdmissionDecision(True, None)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        out: dict[str, int] = {}
        free = state.total_gpus
        for jid in state.jobs:
            n = state.allocation.get(jid, 0)
            if n > 0:
                out[jid] = n
                free -= n
        waiting = sorted(
            (j for j in state.jobs.values() if j.job_id not in out),
            key=lambda j: (j.submit_time, j.job_id),
        )
        return fill_static(waiting, state.total_gpus, free, out)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return None


class TiresiasPolicy(Stateless):
    """Two-dimensional discretised least-attained-service (Tiresias 2D-LAS): jobs sit in
    queues by attained GPU-seconds (thresholds ``queue_limits``), FIFO inside a queue,
    preemptive, each job on its requested GPU count."""

    name = "tiresias"

    def __init__(self, queue_limits: Sequence[float] = (3600.0, 36000.0)) -> None:
        self.queue_limits = sorted(queue_limits)

    def _queue(self, attained: float) -> int:
        return bisect.bisect_right(self.queue_limits, attained)

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        return AdmissionDecision(True, None)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        order = sorted(
            state.jobs.values(),
            key=lambda j: (self._queue(state.attained.get(j.job_id, 0.0)), j.submit_time),
        )
        return fill_static(order, state.total_gpus, state.total_gpus, {})

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        """When the next running job crosses into a lower-priority queue."""
        best: float | None = None
        for jid, n in state.allocation.items():
            if n <= 0 or jid not in state.jobs:
                continue
            a = state.attained.get(jid, 0.0)
            i = self._queue(a)
            if i < len(self.queue_limits):
                t = now + (self.queue_limits[i] - a) / n
                best = t if best is None else min(best, t)
        return best
