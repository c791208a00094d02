"""ElasticFlow admission over a batch-size range (issue 13, section 3; beyond both papers).

ElasticFlow admits a job by its minimum satisfactory share at its fixed batch; Saxena et al.
vary the batch but know no deadlines. Here a job that carries a range (flowcon.alloc.batch)
is planned over (GPU count, batch size): its work is counted in samples (iterations x the
batch it was submitted with) and its speed at k GPUs is the best of its batches there,
``envelope`` of the range. ElasticFlow's own admission (Algorithm 1, SlotLedger) and
allocation (Algorithm 2) then run unchanged on that curve: the candidate configurations
enter through the curve the ledger is given, nothing of them is copied. A job at k GPUs
runs at ``best_batch(k)``, so the plan's speed is the speed it gets; a job can thus be
admitted at a batch that meets its deadline on fewer GPUs. Jobs without a range are
ElasticFlow's.
"""

from __future__ import annotations

from typing import Any

from flowcon.alloc.admission import AdmissionDecision
from flowcon.alloc.batch import best_batch, envelope
from flowcon.alloc.model import Job
from flowcon.alloc.policy import ClusterState, ElasticFlowPolicy


class ElasticFlowBatchPolicy(ElasticFlowPolicy):
    """``elasticflow`` whose ranged jobs are planned and run on their range's envelope."""

    name = "elasticflow-batch"

    def __init__(self, overhead: float = 0.0, **kw: Any) -> None:
        super().__init__(overhead, **kw)
        self.batch_of: dict[str, int] = {}  # the batch each running ranged job runs at

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        if job.batch_range is not None:
            job.curve = envelope(job.batch_range)
        return super().on_submit(job, now, state)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        alloc = super().schedule(now, state)
        self.batch_of = {
            jid: best_batch(job.batch_range, alloc.get(jid, 0))
            for jid, job in state.jobs.items()
            if job.batch_range is not None and alloc.get(jid, 0) > 0
        }
        return alloc

    def restore(self, now: float, state: ClusterState) -> None:
        for job in state.jobs.values():
            if job.batch_range is not None:
                job.curve = envelope(job.batch_range)
        super().restore(now, state)
