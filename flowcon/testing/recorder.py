"""A policy wrapper that records every decision, to compare two drivers of one policy.

``Recorder`` delegates each ``flowcon.alloc.types.Policy`` call to the policy it wraps and
keeps what ``schedule`` returned at each decision time (jobs with GPUs only): the live
planner and the simulator, each driving a recorder around the same policy class, must
record the same decisions (tests/allocator/test_planner_matches_simulator.py,
benchmarks/bench_scale.py).
"""

from __future__ import annotations

from flowcon.alloc.model import Job
from flowcon.alloc.types import AdmissionDecision, ClusterState, Policy

# decision time -> {job: GPUs} of the jobs that hold GPUs
Decisions = dict[float, dict[str, int]]


class Recorder:
    """Delegates to a policy and records what ``schedule`` returned at each decision."""

    def __init__(self, inner: Policy) -> None:
        self.inner = inner
        self.name = inner.name
        self.decisions: Decisions = {}

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        return self.inner.on_submit(job, now, state)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        out = self.inner.schedule(now, state)
        self.decisions[now] = {j: n for j, n in out.items() if n > 0 and j in state.jobs}
        return out

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        self.inner.on_finish(job_id, now, state)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return self.inner.next_wakeup(now, state)

    def restore(self, now: float, state: ClusterState) -> None:
        self.inner.restore(now, state)

    def on_curve_change(self, job_id: str, now: float, state: ClusterState) -> None:
        self.inner.on_curve_change(job_id, now, state)

    def set_overhead(self, seconds: float) -> None:
        self.inner.set_overhead(seconds)
