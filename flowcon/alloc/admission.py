"""Admission control by minimum satisfactory share (ElasticFlow Algorithm 1).

Time is cut into scheduling slots. Hard-deadline jobs are planned in deadline order; each one
is satisfied at the smallest cap ``j = 1, 2, 4, ...`` whose ``x(t) = min(j, free(t))`` GPUs
(rounded down to the best power of two) over the slots before its deadline cover its
iterations, and holds that cap from now on until they are covered (as early as the free GPUs
allow; the paper fills from the deadline backwards, see ``_reserve_forward``). A job is
admitted only if every hard-deadline job still fits afterwards.

``SlotLedger`` keeps the plans between decisions so that an arrival only re-plans the jobs
whose deadline is not earlier than the newcomer's (earlier ones cannot be affected: they are
filled first). Plans of earlier jobs may be stale (made when those jobs had more work left),
which only over-reserves; before a rejection the ledger re-plans everything from the current
progress and tries again, so staleness never causes a wrong drop.

Plans and the reserved-GPU profile are step functions over slots (runs of equal value), not
per-slot arrays: a horizon of thousands of slots has only tens of steps, so progressive
filling costs O(steps + levels^2) per job in plain Python (no numpy import on the hot path).

This module is the public entry (``admit``, ``deadline_order``, and the names below); the
parts are flowcon/alloc/admission_steps.py (the step functions), flowcon/alloc/filling.py
(progressive filling's maths) and flowcon/alloc/ledger.py (``SlotLedger``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence

from flowcon.alloc.ledger import FinishProbe as FinishProbe
from flowcon.alloc.ledger import SlotLedger as SlotLedger
from flowcon.alloc.model import Job
from flowcon.alloc.types import AdmissionDecision as AdmissionDecision
from flowcon.alloc.types import SlotPlan as SlotPlan


def admit(
    job: Job,
    admitted: Sequence[Job],
    now: float,
    total_gpus: int,
    slot: float,
    *,
    power_of_two: bool = True,
) -> AdmissionDecision:
    """Algorithm 1 from scratch: would ``job`` and all hard-deadline ``admitted`` jobs (with
    their current progress) meet their deadlines? The slot grid starts at ``now``.
    ``power_of_two=False`` allows any GPU count (used to check Theorem 1).

    Admitted jobs that are already unsatisfiable on their own are not held against the
    newcomer (they have lost their guarantee). The decision carries every job's plan.
    """
    ledger = SlotLedger(total_gpus, slot, origin=now, power_of_two=power_of_two)
    by_id = {j.job_id: j for j in admitted if j.needs_guarantee and j.remaining > 0}
    for j in sorted(by_id.values(), key=lambda j: (j.deadline, j.submit_time, j.job_id)):
        ledger._try(j, by_id, now)  # builds the existing plans in deadline order
    by_id_all = dict(by_id)
    by_id_all[job.job_id] = job
    decision = ledger.try_admit(job, by_id_all, now)
    return AdmissionDecision(decision.admitted, decision.reason, ledger.shares(now), ledger.plans())


def deadline_order(jobs: Iterable[Job]) -> list[Job]:
    return sorted(
        jobs, key=lambda j: (math.inf if j.deadline is None else j.deadline, j.submit_time)
    )
