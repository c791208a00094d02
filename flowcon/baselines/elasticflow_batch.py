"""ElasticFlow admission over a batch-size range (beyond both papers).

ElasticFlow admits a job by its minimum satisfactory share at its fixed batch; Saxena et al.
vary the batch but know no deadlines. Here a job that carries a range (flowcon.alloc.batch)
is planned over (GPU count, batch size): its work is counted in samples (iterations x the
batch it was submitted with) and its speed at k GPUs is the best of its batches there,
``envelope`` of the range. ElasticFlow's own admission (Algorithm 1, SlotLedger) and
allocation (Algorithm 2), an ``ElasticFlowPolicy`` this policy wraps, then run unchanged on
that curve: the candidate configurations enter through the curve the ledger is given,
nothing of them is copied. A job at k GPUs runs at ``best_batch(k)``, so the plan's speed
is the speed it gets; a job can thus be admitted at a batch that meets its deadline on
fewer GPUs. Jobs without a range are ElasticFlow's.

Kept with the baselines, and a live policy (the allocator's ``policy: elasticflow-batch``):
there a job's range is ``flowcon.alloc.batch.live_range`` (the batches its pre-run
measured, and the weak-scaling batch elsewhere), and the executor runs ``best_batch`` of
that same range (``flowcon.allocator.records.run_batch``), so the batch this policy plans
with is the batch the job runs at.
"""

from __future__ import annotations

from flowcon.alloc.batch import best_batch, envelope
from flowcon.alloc.model import Job
from flowcon.alloc.policy import ElasticFlowPolicy
from flowcon.alloc.types import AdmissionDecision, ClusterState


class ElasticFlowBatchPolicy:
    """``inner`` (an ``ElasticFlowPolicy``) with its ranged jobs planned and run on their
    range's envelope."""

    name = "elasticflow-batch"

    def __init__(self, inner: ElasticFlowPolicy) -> None:
        self.inner = inner
        self.batch_of: dict[str, int] = {}  # the batch each running ranged job runs at

    @staticmethod
    def _on_envelope(job: Job) -> None:
        if job.batch_range is not None:
            job.curve = envelope(job.batch_range)

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision:
        self._on_envelope(job)
        return self.inner.on_submit(job, now, state)

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]:
        alloc = self.inner.schedule(now, state)
        self.batch_of = {}
        for jid, job in state.jobs.items():
            n = alloc.get(jid, 0)
            if job.batch_range is not None and n > 0:
                self.batch_of[jid] = best_batch(job.batch_range, n)
        return alloc

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None:
        self.inner.on_finish(job_id, now, state)

    def next_wakeup(self, now: float, state: ClusterState) -> float | None:
        return self.inner.next_wakeup(now, state)

    def restore(self, now: float, state: ClusterState) -> None:
        for job in state.jobs.values():
            self._on_envelope(job)
        self.inner.restore(now, state)

    def on_curve_change(self, job_id: str, now: float, state: ClusterState) -> None:
        self.inner.on_curve_change(job_id, now, state)

    def set_overhead(self, seconds: float) -> None:
        self.inner.set_overhead(seconds)
