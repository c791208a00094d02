"""The types shared by the allocation policies and their drivers (the simulator and the
live allocator): the cluster state a policy sees, the policy interface, and an admission
decision with the per-slot plans it carries. Pure data, no I/O.

Every scheduling policy (the product's in flowcon/alloc/policy.py, the papers' baselines in
flowcon/baselines/) implements ``Policy``. A driver (simulator or service) owns the jobs
and the clock and calls:

- ``on_submit(job, now, state)`` once per arriving job -> AdmissionDecision (dropped jobs are
  never scheduled; the reason says why);
- ``schedule(now, state)`` at decision points -> {job_id: GPUs} for every job in
  ``state.jobs`` (0 = paused/queued);
- ``on_finish(job_id, now, state)`` when a job completes or is cancelled;
- ``next_wakeup(now, state)`` -> the next time the policy wants ``schedule`` called even if no
  job arrives or finishes (None = only on events).

What a long-running driver (the live allocator) needs beyond the paper is part of the
interface too, so the simulator runs exactly the same code:

- ``restore(now, state)`` after a restart of the driver: rebuild internal state (ElasticFlow's
  minimum-share ledger) from the jobs' progress;
- ``on_curve_change(job_id, now, state)`` when a job's throughput curve was refined by
  measurements (its reservation was planned with the old curve);
- ``set_overhead(seconds)``: the measured checkpoint-restart cost charged from now on.

``state.jobs`` holds the admitted, unfinished jobs with up-to-date ``done_iterations``;
``state.tick`` is True when ``schedule`` is called only because time passed (a slot tick or
the policy's own wakeup), not because a job arrived, finished or changed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from flowcon.alloc.model import Job

_EPS = 1e-9


@dataclass(frozen=True)
class SlotPlan:
    """GPUs reserved for one job per slot; slot k covers [start + k*slot, start + (k+1)*slot)."""

    start: float
    slot: float
    gpus: tuple[int, ...]

    def at(self, t: float) -> int:
        k = int(math.floor((t - self.start) / self.slot + _EPS))
        return self.gpus[k] if 0 <= k < len(self.gpus) else 0


@dataclass(frozen=True)
class AdmissionDecision:
    """``min_share``: GPUs each hard-deadline job needs in the current slot (a_i(0));
    ``plans``: the full per-slot minimum satisfactory share of each of them; ``revoked``:
    admitted jobs whose guarantee this decision gave up (``SlotLedger.try_admit``: they
    fell behind their reservation and no plan meets their deadline any more)."""

    admitted: bool
    reason: str | None = None
    min_share: dict[str, int] = field(default_factory=dict)
    plans: dict[str, SlotPlan] = field(default_factory=dict)
    revoked: tuple[str, ...] = ()


@dataclass
class ClusterState:
    total_gpus: int
    slot: float = 60.0
    jobs: dict[str, Job] = field(default_factory=dict)
    allocation: dict[str, int] = field(default_factory=dict)  # current GPUs per job
    attained: dict[str, float] = field(default_factory=dict)  # GPU-seconds served so far
    tick: bool = False  # this decision is a slot tick / wakeup, no event happened


class Policy(Protocol):
    name: str

    def on_submit(self, job: Job, now: float, state: ClusterState) -> AdmissionDecision: ...

    def schedule(self, now: float, state: ClusterState) -> dict[str, int]: ...

    def on_finish(self, job_id: str, now: float, state: ClusterState) -> None: ...

    def next_wakeup(self, now: float, state: ClusterState) -> float | None: ...

    def restore(self, now: float, state: ClusterState) -> None: ...

    def on_curve_change(self, job_id: str, now: float, state: ClusterState) -> None: ...

    def set_overhead(self, seconds: float) -> None: ...
