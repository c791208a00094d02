"""Users for a trace that has none (pure): each job's owner drawn from its id, so the same
trace and seed give the same owners on every run and machine.

The published traces carry no user column. ``assign_owners`` spreads the jobs over
``users`` owners by a hash of each job id and the seed; ``skew`` > 0 makes a few users
submit most of the jobs (owner k gets weight 1 / (k + 1) ** skew, Zipf-like, as on shared
clusters where a few teams run most of the work).
"""

from __future__ import annotations

import bisect
import zlib
from collections.abc import Iterable

from flowcon.alloc.model import Job


def owner_name(k: int) -> str:
    return f"user{k:02d}"


def assign_owners(jobs: Iterable[Job], users: int, seed: int = 0, skew: float = 0.0) -> None:
    """Set ``job.owner`` of every job to one of ``users`` names (user00, user01, ...)."""
    if users < 1:
        raise ValueError(f"users must be >= 1, got {users}")
    weights = [1.0 / (k + 1) ** skew for k in range(users)]
    total = sum(weights)
    cumulative, acc = [], 0.0
    for w in weights:
        acc += w / total
        cumulative.append(acc)
    for job in jobs:
        u = zlib.crc32(f"{seed}:{job.job_id}".encode()) / 2**32  # in [0, 1)
        job.owner = owner_name(min(bisect.bisect_right(cumulative, u), users - 1))
