"""Per-user quotas (pure): how many jobs a user may have active, and how many GPUs their
deadline jobs may hold, checked when a job is submitted (and in its dry run).

As Slurm's association limits (``MaxJobs``, ``GrpTRES=gres/gpu=8``) and Kueue's
ClusterQueue quotas: a submit over a quota is refused with a reason naming the quota and
the usage (``quota: alice holds 8 of 8 GPUs in deadline jobs (max_gpus) ...``). GPUs that
best-effort jobs hold are spare GPUs, the first taken back: they count against no quota,
and a best-effort job is never refused for GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from flowcon.allocator.store import JobRecord
from flowcon.jobspec.spec import JobSpec


@dataclass(frozen=True)
class Quota:
    """A user's limits; None: no limit."""

    max_gpus: int | None = None  # GPUs held by the user's active deadline jobs
    max_jobs: int | None = None  # the user's active (and profiling) jobs


def quota_problem(
    owner: str, quota: Quota, records: Iterable[JobRecord], spec: JobSpec
) -> str | None:
    """Why ``owner`` may not submit ``spec`` now (None: within the quota); ``records``:
    the store's jobs (the owner's active ones count)."""
    mine = [
        r for r in records if r.owner == owner and (r.active or r.pending) and r.name != spec.name
    ]
    if quota.max_jobs is not None and len(mine) >= quota.max_jobs:
        return f"quota: {owner} has {len(mine)} of {quota.max_jobs} active jobs (max_jobs)"
    if quota.max_gpus is None or spec.best_effort:
        return None
    held = sum(r.gpus for r in mine if r.deadline is not None)
    if held + spec.min_gpus > quota.max_gpus:
        return (
            f"quota: {owner} holds {held} of {quota.max_gpus} GPUs in deadline jobs"
            f" (max_gpus); this job needs at least {spec.min_gpus}"
        )
    return None
