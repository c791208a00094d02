"""Perturbed copies of a trace, to see how much of a difference between two policies on a
small trace is the policies and how much is the trace's luck.

On 195 jobs one job is 0.005 of the deadline satisfactory ratio, and both simulators are
chaotic: a decision one slot earlier changes which jobs fit later. Moving each submission
by a second or so (``jitter_submissions``) keeps the workload what it is and gives a
spread of outcomes for each policy; ``benchmarks/bench_simulator.py --spread`` reports
the mean, the spread and the paired gain over those copies.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from flowcon.alloc.model import Job


def jitter_submissions(jobs: Sequence[Job], seed: int, seconds: int = 1) -> list[Job]:
    """Copies of ``jobs`` (progress reset) with each submission time moved by a whole
    number of seconds drawn uniformly from [-``seconds``, ``seconds``]
    (``random.Random(seed)``, one draw per job in the given order), kept within
    [0, deadline]; returned by the new submission time, ties in the given order (as
    ``load_trace`` orders a trace). ``jobs`` is not changed. Everything else of a job
    (work, deadline, curve, GPU limits) is the same."""
    if isinstance(seconds, bool) or not isinstance(seconds, int) or seconds < 0:
        raise ValueError(f"jitter seconds must be a whole number >= 0, got {seconds!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"jitter seed must be a whole number, got {seed!r}")
    rng = random.Random(seed)
    out: list[Job] = []
    for job in jobs:
        t = job.submit_time + rng.randint(-seconds, seconds)
        if job.deadline is not None and t > job.deadline:
            t = job.deadline
        t = max(0.0, float(t))
        out.append(replace(job, submit_time=t, done_iterations=0.0))
    out.sort(key=lambda j: j.submit_time)  # stable: ties keep the given order
    return out
