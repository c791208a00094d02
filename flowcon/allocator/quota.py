"""Per-user quotas in the allocator: the store's jobs as the pure rule counts them
(flowcon/alloc/quota.py), checked when a job is submitted (and in its dry run)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from flowcon.alloc.quota import Holding, Quota, quota_problem
from flowcon.allocator.store import JobRecord
from flowcon.jobspec.spec import JobSpec

__all__ = ["Quota", "holdings", "prerun_allowance", "spec_quota_problem"]


def holdings(
    owner: str, records: Iterable[JobRecord], guaranteed: Mapping[str, int], skip: str = ""
) -> list[Holding]:
    """``owner``'s active and pending jobs (not ``skip``, a name being reused), each with
    its minimum satisfactory share from ``guaranteed`` where the policy keeps one."""
    return [
        Holding(r.name, r.deadline is not None, r.gpus, guaranteed.get(r.name))
        for r in records
        if r.owner == owner and (r.active or r.pending) and r.name != skip
    ]


def prerun_allowance(
    owner: str,
    quota: Quota | None,
    records: Iterable[JobRecord],
    guaranteed: Mapping[str, int] | None = None,
    skip: str = "",
) -> int | None:
    """How many GPUs a pre-run of ``owner``'s job ``skip`` may take: what ``max_gpus``
    leaves beside the GPUs the owner's other jobs count against it (never below 0);
    None: no GPU quota."""
    if quota is None or quota.max_gpus is None:
        return None
    held = sum(h.counted for h in holdings(owner, records, guaranteed or {}, skip=skip))
    return max(0, quota.max_gpus - held)


def spec_quota_problem(
    owner: str,
    quota: Quota,
    records: Iterable[JobRecord],
    spec: JobSpec,
    guaranteed: Mapping[str, int] | None = None,
) -> str | None:
    """Why ``owner`` may not submit ``spec`` now (None: within the quota)."""
    mine = holdings(owner, records, guaranteed or {}, skip=spec.name)
    return quota_problem(owner, quota, mine, best_effort=spec.best_effort, needs=spec.min_gpus)
