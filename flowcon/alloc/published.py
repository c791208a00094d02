"""Policies as the published ElasticFlow simulator (pkusys/ElasticFlow) defines them, for
``flowcon simulate --world published``: re-implemented from its description, no code copied.

- ``EDFPublished``: earliest deadline first, no admission control; each job gets
  ``max_gpu`` GPUs (its largest profiled count, capped at 64 and at its batch size) even
  where its throughput falls there; when fewer are free, the largest power of two that is.
- ``ElasticFlowPublished``: ElasticFlow whose arrivals of one decision are admitted or
  declined together: every hard-deadline job, admitted ones from their current progress
  and the arrivals, is re-planned from scratch in deadline order, and when that fails for
  any of them, all the arrivals are declined (the published simulator's
  ``estimate_all_jobs`` over the runnable jobs and the event's arrivals). No overhead
  margin in admission (that world charges overheads outside the plan).
"""

from __future__ import annotations

from collections.abc import Sequence

from flowcon.alloc.admission import AdmissionDecision, SlotLedger
from flowcon.alloc.model import Job, floor_power_of_two
from flowcon.alloc.policy import ClusterState, EDFPolicy, ElasticFlowPolicy, _edf_order


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

    def __init__(self) -> None:
        super().__init__(overhead=0.0)

    def on_submit_batch(
        self, jobs: Sequence[Job], now: float, state: ClusterState
    ) -> list[AdmissionDecision]:
        """All hard-deadline jobs (admitted ones from their current progress, and the
        arrivals) re-planned from scratch in deadline order; if any fails, every arrival
        is declined and the old plans stay; else the fresh plans replace them."""
        old = self._get_ledger(state)
        fresh = SlotLedger(state.total_gpus, state.slot, origin=now, overhead=self.overhead)
        everyone: dict[str, Job] = dict(state.jobs)
        everyone.update((j.job_id, j) for j in jobs)
        new = {j.job_id for j in jobs}
        failed: str | None = None
        for j in sorted(everyone.values(), key=_deadline_key):
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


def _deadline_key(j: Job) -> tuple[float, float, str]:
    return (float("inf") if j.deadline is None else j.deadline, j.submit_time, j.job_id)
