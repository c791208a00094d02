"""Per-user quotas (pure): how many jobs a user may have active, and how many GPUs their
deadline jobs' guarantees may take. One rule for the allocator service and the simulator.

As Slurm's association limits (``MaxJobs``, ``GrpTRES=gres/gpu=8``) and Kueue's
ClusterQueue quotas: a submit over a quota is refused with a reason naming the quota and
the usage (``quota: alice holds 8 of 8 GPUs in deadline jobs (max_gpus) ...``).

What counts against ``max_gpus`` is what admission guaranteed: each of the user's deadline
jobs counts its minimum satisfactory share now (ElasticFlow's a_i(0), the share its
reservation holds in the current slot). The spare GPUs the allocator gives out by marginal
return, to deadline and best-effort jobs alike, count against no quota: they are the first
taken back, because every round gives the minimum shares first and only then the spare
GPUs (flowcon/alloc/allocation.py). Where the policy keeps no reservations (a baseline),
a deadline job counts the GPUs it holds. A best-effort job is never refused for GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class Quota:
    """A user's limits; None: no limit."""

    max_gpus: int | None = None  # GPUs guaranteed to the user's active deadline jobs
    max_jobs: int | None = None  # the user's active (and pending) jobs


@dataclass(frozen=True)
class Holding:
    """One active or pending job of a user, as a quota counts it."""

    name: str
    deadline: bool  # a guaranteed (deadline) job; False: best effort
    gpus: int = 0  # GPUs it holds now
    guaranteed: int | None = None  # its minimum satisfactory share now (None: unknown)

    @property
    def counted(self) -> int:
        """GPUs it counts against ``max_gpus``: its guarantee, never its spare GPUs."""
        if not self.deadline:
            return 0
        return self.gpus if self.guaranteed is None else self.guaranteed


def quota_problem(
    owner: str, quota: Quota, holdings: Iterable[Holding], *, best_effort: bool, needs: int
) -> str | None:
    """Why ``owner``, holding ``holdings``, may not submit a job that needs at least
    ``needs`` GPUs (its ``min_gpus``) now; None: within the quota."""
    mine = list(holdings)
    if quota.max_jobs is not None and len(mine) >= quota.max_jobs:
        return f"quota: {owner} has {len(mine)} of {quota.max_jobs} active jobs (max_jobs)"
    if quota.max_gpus is None or best_effort:
        return None
    held = sum(h.counted for h in mine)
    if held + needs > quota.max_gpus:
        return (
            f"quota: {owner} holds {held} of {quota.max_gpus} GPUs in deadline jobs"
            f" (max_gpus); this job needs at least {needs}"
        )
    return None
