"""Scheduling policies behind one interface, shared by the simulator and the live service.

A driver (simulator or service) owns the jobs and the clock and calls:

- ``on_submit(job, now, state)`` once per arriving job -> AdmissionDecision (dropped jobs are
  never scheduled; the reason says why);
- ``schedule(now, state)`` at decision points -> {job_id: GPUs} for every job in
  ``state.jobs`` (0 = paused/queued);
- ``on_finish(job_id, now, state)`` when a job completes or is cancelled;
- ``next_wakeup(now, state)`` -> the next time the policy wants ``schedule`` called even if no
  job arrives or finishes (None = only on events).

``state.jobs`` holds the admitted, unfinished jobs with up-to-date ``done_iterations``.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from flowcon.alloc.admission import AdmissionDecision, SlotLedger
from flowcon.alloc.allocation import distribute_spare
from flowcon.alloc.model import Job, floor_power_of_two


@dataclass
class ClusterState:
    total_gpus: int
    slot: float = 60.0
    jobs: dict[str, Job] = field(default_factory=dict)
    allocation: dict[str, int] = field(default_factory=dict)  # current GPUs per job
    attained: dict[str, float] = field(default_factory=dict)  # GPU-seconds served so far


class Policy(Protocol):
    name: str

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision: ...

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]: ...

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None: ...

    def next_wakeup(self, now: float, state: ClusterState) -> float | None: ...


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


class _LedgerMixin:
    """Admission with a SlotLedger shared by ElasticFlow and EDF+admission."""

    overhead: float
    _ledger: SlotLedger | None

    def _get_ledger(self, state: ClusterState) -> SlotLedger:
        if self._ledger is None:
            self._ledger = SlotLedger(state.total_gpus, state.slot, overhead=self.overhead)
        return self._ledger

    def _admit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        ledger = self._get_ledger(state)
        jobs: dict[str, Job] = dict(state.jobs)
        jobs[job.job_id] = job
        return ledger.try_admit(job, jobs, now)

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        if self._ledger is not None:
            self._ledger.remove(job_id)

    def replan(self, now: float, state: ClusterState) -> list[str]:
        """Re-plan all minimum shares from current progress (after measured slowdowns).
        Returns the jobs that lost their guarantee."""
        return self._get_ledger(state).replan(state.jobs, now)


class ElasticFlowPolicy(_LedgerMixin):
    """Admission by minimum satisfactory share + greedy marginal-return allocation."""

    name = "elasticflow"

    def __init__(self, overhead: float = 0.0) -> None:
        self.overhead = overhead
        self._ledger = None

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        return self._admit(job, now, state)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        ledger = self._get_ledger(state)
        for jid in [j for j in ledger.jobs() if j not in state.jobs]:
            ledger.remove(jid)
        behind = ledger.behind(state.jobs, now)
        if behind:
            ledger.refresh(behind, state.jobs, now)
        base = {jid: ledger.share(jid, now) for jid in state.jobs}
        return distribute_spare(list(state.jobs.values()), base, state.total_gpus, state.slot)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return self._get_ledger(state).next_change(now)


def _edf_order(jobs: Sequence[Job]) -> list[Job]:
    return sorted(
        jobs,
        key=lambda j: (math.inf if j.deadline is None else j.deadline, j.submit_time, j.job_id),
    )


def _edf_allocate(jobs: Sequence[Job], total: int) -> dict[str, int]:
    """Earliest deadline first, each job as many GPUs as it scales to without slowing down."""
    free = total
    out = {j.job_id: 0 for j in jobs}
    for j in _edf_order(jobs):
        if free <= 0:
            break
        n, _ = j.curve.best_at_most(min(floor_power_of_two(free), j.gpu_cap(total)))
        out[j.job_id] = n
        free -= n
    return out


class EDFPolicy(_LedgerMixin):
    """EDF; with ``admission=True`` jobs are first filtered by ElasticFlow's admission
    control (the paper's ablation), but allocation stays EDF."""

    def __init__(self, admission: bool = False, overhead: float = 0.0) -> None:
        self.admission = admission
        self.name = "edf-admission" if admission else "edf"
        self.overhead = overhead
        self._ledger = None

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        if self.admission:
            return self._admit(job, now, state)
        return AdmissionDecision(True, None)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        return _edf_allocate(list(state.jobs.values()), state.total_gpus)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return None


class GandivaPolicy:
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

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        return None

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return None


class TiresiasPolicy:
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

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        return None

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


POLICIES: Mapping[str, str] = {
    "elasticflow": "ElasticFlow: admission by minimum satisfactory share + marginal return",
    "edf": "Earliest deadline first, elastic, no admission control",
    "edf-admission": "EDF allocation behind ElasticFlow's admission control",
    "gandiva": "Static requested GPUs, arrival order, non-preemptive",
    "tiresias": "Static requested GPUs, 2D least attained service, preemptive",
}


def make_policy(name: str, overhead: float = 0.0) -> Policy:
    if name == "elasticflow":
        return ElasticFlowPolicy(overhead=overhead)
    if name == "edf":
        return EDFPolicy(admission=False, overhead=overhead)
    if name == "edf-admission":
        return EDFPolicy(admission=True, overhead=overhead)
    if name == "gandiva":
        return GandivaPolicy()
    if name == "tiresias":
        return TiresiasPolicy()
    raise ValueError(f"unknown policy {name!r}; choose from {', '.join(POLICIES)}")
