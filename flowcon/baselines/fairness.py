"""Themis (NSDI'20), finish-time fairness, as ElasticFlow's evaluation uses it (section 6).

rho = T_shared / T_independent: T_independent is the job's run time alone on the GPUs it
asked for; T_shared is the time since it was submitted plus its remaining run time on
them from now. Each lease round ranks the jobs by rho, worst (largest) first, and offers
each its requested GPU count in that order while GPUs are left; a job that does not fit
waits (a later, smaller one may take the GPUs). Between rounds running jobs keep their
GPUs and free ones go to waiting jobs in the same order.

Deviations from Themis: no auction (no bids, no partial allocations, no fraction 1 - f
of the jobs singled out: every job takes part in every round, in rho order), rho
uses the requested GPU count rather than a 1/N share of the cluster, and the lease is a
fixed grid (``lease`` seconds, 600 by default). Not elastic: a job runs on its requested
count (rounded up to a power of two, at most the cluster) or not at all.
"""

from __future__ import annotations

from flowcon.alloc.model import Job
from flowcon.alloc.types import AdmissionDecision, ClusterState
from flowcon.baselines.static import Stateless, fill_static, static_gpus
from flowcon.baselines.steps import LeaseClock, keep_running


def finish_time_fairness(job: Job, now: float, total_gpus: int) -> float:
    """rho of ``job`` at ``now`` if it ran on its requested GPUs from now on."""
    rate = job.curve.at(static_gpus(job, total_gpus))
    if rate <= 0:
        return 0.0
    t_id = job.iterations / rate
    t_sh = max(0.0, now - job.submit_time) + job.remaining / rate
    return t_sh / t_id


class ThemisPolicy(Stateless):
    name = "themis"

    def __init__(self, lease: float = 600.0) -> None:
        self.clock = LeaseClock(lease)

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        return AdmissionDecision(True, None)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        total = state.total_gpus
        order = sorted(
            state.jobs.values(),
            key=lambda j: (-finish_time_fairness(j, now, total), j.submit_time, j.job_id),
        )
        if self.clock.new_round(now):
            return fill_static(order, total, total, {})
        out, free = keep_running(state)
        return fill_static([j for j in order if j.job_id not in out], total, free, out)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return self.clock.next_round(state)
