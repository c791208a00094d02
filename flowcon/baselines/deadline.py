"""Chronus (SoCC'21), deadline-aware and lease-based, as ElasticFlow's evaluation uses it
(section 6: "deadline-aware but not elastic").

- Leases: time is cut into leases of ``lease`` seconds (600 by default) on an absolute
  grid; GPUs are re-assigned at the start of each lease. Between lease starts running
  jobs keep their GPUs and free GPUs go to waiting jobs.
- Admission: a job with a deadline is admitted as an SLO job if, next to the SLO jobs
  already admitted, a lease plan exists in which every one of them finishes by its
  deadline on its requested GPU count: SLO jobs in deadline order each take the earliest
  leases with enough GPUs left (GPUs held by running best-effort jobs count as taken in
  the current lease). A job that fails the check is still run, as best-effort.
- Each lease: SLO jobs in deadline order, then best-effort jobs by shortest remaining run
  time (Chronus minimises their average JCT), each on its requested GPU count if it fits.

Deviations from Chronus: the plan is this greedy earliest-lease fill, not Chronus' MILP
over lease assignments; no best-effort-first lease reordering or local search; GPU
placement is left to the simulator's buddy placer. Not elastic.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from flowcon.alloc.model import Job, deadline_order_key
from flowcon.alloc.types import AdmissionDecision, ClusterState
from flowcon.baselines.static import fill_static, static_gpus
from flowcon.baselines.steps import LeaseClock, keep_running

_EPS = 1e-6


class ChronusPolicy:
    name = "chronus"

    def __init__(self, lease: float = 600.0) -> None:
        self.clock = LeaseClock(lease)
        self.lease = self.clock.lease
        self.slo: set[str] = set()

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        if job.deadline is not None and self._feasible(job, now, state):
            self.slo.add(job.job_id)
        return AdmissionDecision(True, None)

    def _feasible(self, job: Job, now: float, state: ClusterState) -> bool:
        """The lease plan of the admitted SLO jobs and ``job`` meets every deadline."""
        total = state.total_gpus
        k0 = math.floor(now / self.lease + 1e-9)
        used: dict[int, int] = {
            k0: sum(
                n
                for jid, n in state.allocation.items()
                if n > 0 and jid in state.jobs and jid not in self.slo
            )
        }
        slo = [state.jobs[j] for j in self.slo if j in state.jobs] + [job]
        return all(self._plan(j, now, k0, used, total) for j in _deadline_order(slo))

    def _plan(self, job: Job, now: float, k0: int, used: dict[int, int], total: int) -> bool:
        """Reserve the earliest leases with ``job``'s GPUs free until its work is done."""
        n = static_gpus(job, total)
        rate = job.curve.at(n)
        deadline = job.deadline if job.deadline is not None else math.inf
        need = job.remaining
        k = k0
        while need > _EPS:
            start = max(now, k * self.lease)
            usable = min((k + 1) * self.lease, deadline) - start
            if usable <= 0 or rate <= 0:
                return False
            if used.get(k, 0) + n <= total:
                used[k] = used.get(k, 0) + n
                need -= rate * usable
            k += 1
        return True

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        total = state.total_gpus
        slo = _deadline_order(j for j in state.jobs.values() if j.job_id in self.slo)
        rest = sorted(
            (j for j in state.jobs.values() if j.job_id not in self.slo),
            key=lambda j: (_run_time(j, total), j.submit_time, j.job_id),
        )
        order = slo + rest
        if self.clock.new_round(now):
            return fill_static(order, total, total, {})
        out, free = keep_running(state)
        return fill_static([j for j in order if j.job_id not in out], total, free, out)

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        self.slo.discard(job_id)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return self.clock.next_round(state)

    def restore(self, now: float, state: ClusterState) -> None:
        """After a restart of the driver: re-admit the deadline jobs in deadline order."""
        self.slo.clear()
        for j in _deadline_order(j for j in state.jobs.values() if j.deadline is not None):
            if self._feasible(j, now, state):
                self.slo.add(j.job_id)

    def on_curve_change(self, job_id: str, now: float, state: ClusterState) -> None:
        return None

    def set_overhead(self, seconds: float) -> None:
        return None


def _deadline_order(jobs: Iterable[Job]) -> list[Job]:
    return sorted(jobs, key=deadline_order_key)


def _run_time(job: Job, total: int) -> float:
    rate = job.curve.at(static_gpus(job, total))
    return job.remaining / rate if rate > 0 else math.inf
