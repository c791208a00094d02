"""The generated workload of Saxena et al. (section IV-A, IV-F/G/I), seeded and pure.

Four job categories (Table I), each mapped onto a model of the A100 throughput tables
(the paper's P100 jobs are not in them): 1 compute bound -> resnet50 64..256, 2
communication bound -> bert 64..128, 3 balanced -> vgg16 64..256, 4 no elasticity ->
inception3 at 128 only, on exactly 2 GPUs. Single-GPU job lengths 16, 21, 41, 27 minutes
(section IV-G) at the job's best single-GPU rate; a job's work is that many samples.
Its submitted batch is drawn uniformly from its range's table rows (the Random-BS batch).
A per-GPU batch limit (``max_per_gpu``, 64 by default) stands in for GPU memory: a batch
of 256 needs 4 GPUs, which is what drops fixed large-batch jobs in the paper.

Arrivals are Poisson. The base rate lambda is 1 / the mean single-GPU job length; the
paper's high rate is k_max * lambda on its 40 GPUs. Here *high* is lambda * GPUs * ``load``
(the cluster is offered one GPU's worth of single-GPU work per GPU at load 1, on 40 and
400 GPUs alike), *low* a quarter of it, *bursty* alternates high and low every
``period`` minutes (60 on 40 GPUs, 120 on 400 in the paper).
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from flowcon.alloc.batch import make_range
from flowcon.alloc.model import Job, ThroughputCurve

PATTERNS = ("high", "low", "bursty")


@dataclass(frozen=True)
class Category:
    name: str
    model: str
    low: int
    high: int
    minutes: float  # single-GPU job length at the best feasible batch
    gpus: int | None = None  # fixed GPU count (no elasticity)
    max_per_gpu: int | None = None  # the category's per-GPU batch limit (None: the caller's)


CATEGORIES = (
    Category("compute-bound", "resnet50", 64, 256, 16.0),
    Category("communication-bound", "bert", 64, 128, 21.0),
    Category("balanced", "vgg16", 64, 256, 41.0),
    Category("non-elastic", "inception3", 128, 128, 27.0, gpus=2),
)


def base_rate_per_minute(categories: Sequence[Category] = CATEGORIES) -> float:
    """lambda: the completion rate of a random job on one GPU."""
    return 1.0 / (sum(c.minutes for c in categories) / len(categories))


def arrival_rate(
    pattern: str,
    minute: float,
    gpus: int,
    load: float,
    period: float,
    categories: Sequence[Category] = CATEGORIES,
) -> float:
    """Jobs per minute at ``minute`` under ``pattern``."""
    high = base_rate_per_minute(categories) * gpus * load
    if pattern == "high":
        return high
    if pattern == "low":
        return high / 4
    if pattern == "bursty":
        return high if int(minute // period) % 2 == 0 else high / 4
    raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got {pattern!r}")


def arrivals(
    pattern: str,
    minutes: float,
    gpus: int,
    rng: random.Random,
    load: float,
    period: float,
    categories: Sequence[Category] = CATEGORIES,
) -> list[float]:
    """Poisson arrival times (minutes) with a piecewise constant rate: a draw that crosses
    a phase boundary restarts there (memoryless)."""
    out: list[float] = []
    t = 0.0
    while t < minutes:
        rate = arrival_rate(pattern, t, gpus, load, period, categories)
        end = min(minutes, (math.floor(t / period) + 1) * period)
        nxt = t + rng.expovariate(rate)
        if nxt >= end:
            t = end
            continue
        out.append(nxt)
        t = nxt
    return out


def saxena_workload(
    tables: Mapping[str, Mapping[int, ThroughputCurve]],
    *,
    pattern: str,
    gpus: int,
    minutes: float = 240.0,
    period: float = 60.0,
    seed: int = 0,
    load: float = 1.0,
    max_per_gpu: int = 64,
    categories: Sequence[Category] = CATEGORIES,
) -> list[Job]:
    """The jobs (best-effort, no deadline) arriving over ``minutes``; every draw comes from
    one ``random.Random(seed)``, so a seed gives the same workload everywhere.
    ``categories``: the job mix (default: the A100-table mapping above; the paper's own
    world, flowcon.sim.saxena_paper, passes its Table I categories and tables); a
    category's own ``max_per_gpu`` overrides the argument."""
    if pattern not in PATTERNS:
        raise ValueError(f"pattern must be one of {', '.join(PATTERNS)}, got {pattern!r}")
    if gpus < 1 or minutes <= 0 or period <= 0 or load <= 0:
        raise ValueError("gpus, minutes, period and load must be positive")
    missing = [c.model for c in categories if c.model not in tables]
    if missing:
        raise ValueError(f"no throughput table for model {missing[0]!r}")
    rng = random.Random(seed)
    jobs: list[Job] = []
    for i, minute in enumerate(arrivals(pattern, minutes, gpus, rng, load, period, categories)):
        cat = rng.choice(categories)
        rows = tables[cat.model]
        limit = cat.max_per_gpu or max_per_gpu
        probe = make_range(rows, cat.low, cat.high, _first(rows, cat), limit)
        submitted = rng.choice(probe.batches)
        brange = make_range(rows, cat.low, cat.high, submitted, limit)
        samples = cat.minutes * 60.0 * brange.base_rate()
        jobs.append(
            Job(
                job_id=f"sx{i:05d}",
                submit_time=round(minute * 60.0, 3),
                iterations=samples / submitted,
                deadline=None,
                curve=brange.equivalent(submitted),
                min_gpus=cat.gpus or 1,
                max_gpus=cat.gpus,
                requested_gpus=cat.gpus or 1,
                model=cat.model,
                batch_size=submitted,
                batch_range=brange,
            )
        )
    return jobs


def _first(rows: Mapping[int, ThroughputCurve], cat: Category) -> int:
    inside = [b for b in rows if cat.low <= b <= cat.high]
    if not inside:
        raise ValueError(f"model {cat.model!r} has no table row in [{cat.low}, {cat.high}]")
    return min(inside)
