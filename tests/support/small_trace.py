"""The small hand-checked traces of the baseline tests: one throughput curve, a job
builder, and finish times from the simulator (our world, no overhead, 60 s slots)."""

from __future__ import annotations

from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.alloc.types import Policy
from flowcon.sim.engine import Simulator

# 1 GPU: 1.0 it/s, 2 GPUs: 1.5, 4 GPUs: 2.0; no faster beyond 4
CURVE = ThroughputCurve({1: 1.0, 2: 1.5, 4: 2.0})


def job(jid: str, submit: float, iters: float, req: int = 1, deadline: float | None = None) -> Job:
    return Job(jid, submit, iters, deadline, CURVE, requested_gpus=req)


def finishes(jobs: list[Job], policy: Policy, cluster: str = "1x4") -> dict[str, float | None]:
    """Finish time of each job: our world, no overhead, decisions on 60 s slots."""
    res = Simulator(jobs, Topology.from_spec(cluster), policy, slot=60.0).run()
    return {r.job.job_id: r.finish for r in res.results}
