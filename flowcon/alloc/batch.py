"""Batch-size ranges of jobs and T(b, k), the throughput at global batch ``b`` on ``k`` GPUs
(Saxena et al., "Effective Elastic Scaling of Deep Learning Workloads", section III-B).

Pure data, no I/O. The throughput tables give iterations per second per (batch, GPU count);
a job that may run at any batch of its range counts its work in samples (iterations x the
batch it was submitted with), so a batch change keeps the work left. ``equivalent(b)``
expresses the speed at batch ``b`` in iterations *of the submitted batch* per second, the
unit ``Job.iterations`` and the simulator's progress keep: switching a job's curve to it is
all a batch change takes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from flowcon.alloc.model import Job, ThroughputCurve

# model -> global batch size -> curve (flowcon.sim.loaders.Tables)
Tables = Mapping[str, Mapping[int, ThroughputCurve]]


def throughput(tables: Tables, model: str, batch: int, gpus: int) -> float:
    """T(b, k): samples per second of ``model`` at global batch ``batch`` on ``gpus`` GPUs,
    from the measured cell of its throughput table; 0.0 where the table has no such row or
    cell (not measured = not runnable)."""
    row = tables.get(model, {}).get(batch)
    if row is None:
        return 0.0
    return row.points.get(gpus, 0.0) * batch


@dataclass(frozen=True)
class BatchRange:
    """A job's permissible global batch sizes: ``low`` <= b <= ``high``, submitted at
    ``submitted``; ``curves`` holds the throughput-table row (iterations/s per GPU count) of
    every batch of the range the table has. ``max_per_gpu``: the largest per-GPU batch
    ceil(b / k) that fits in one GPU's memory (None: any); configurations beyond it, and
    GPU counts the row did not measure, are infeasible (the paper's "large negative")."""

    low: int
    high: int
    submitted: int
    curves: Mapping[int, ThroughputCurve]
    max_per_gpu: int | None = None
    _equiv: dict[int, ThroughputCurve] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )

    def __post_init__(self) -> None:
        if self.low < 1:
            raise ValueError(f"batch_size_min must be >= 1, got {self.low}")
        if self.high < self.low:
            raise ValueError(f"batch_size_max {self.high} is below batch_size_min {self.low}")
        if not self.low <= self.submitted <= self.high:
            raise ValueError(f"batch_size {self.submitted} is outside [{self.low}, {self.high}]")
        if self.submitted not in self.curves:
            raise ValueError(f"no throughput row for the submitted batch {self.submitted}")
        outside = [b for b in self.curves if not self.low <= b <= self.high]
        if outside:
            raise ValueError(f"throughput rows {outside} are outside [{self.low}, {self.high}]")
        if self.max_per_gpu is not None and self.max_per_gpu < 1:
            raise ValueError(f"max_per_gpu must be >= 1, got {self.max_per_gpu}")
        object.__setattr__(self, "curves", MappingProxyType(dict(sorted(self.curves.items()))))

    def __deepcopy__(self, memo: dict[int, Any]) -> BatchRange:
        """Immutable (the cache holds derived curves only): shared by deep copies."""
        return self

    @property
    def batches(self) -> tuple[int, ...]:
        return tuple(self.curves)

    def feasible(self, batch: int, gpus: int) -> bool:
        curve = self.curves.get(batch)
        if curve is None or gpus < 1 or gpus > batch or gpus not in curve.points:
            return False
        return self.max_per_gpu is None or math.ceil(batch / gpus) <= self.max_per_gpu

    def rate(self, batch: int, gpus: int) -> float:
        """T(b, k) in samples/s; 0.0 for an infeasible configuration."""
        if not self.feasible(batch, gpus):
            return 0.0
        return self.curves[batch].points[gpus] * batch

    def gpu_counts(self, batch: int) -> list[int]:
        """GPU counts at which ``batch`` is feasible, ascending."""
        curve = self.curves.get(batch)
        return [k for k in curve.points if self.feasible(batch, k)] if curve else []

    def base_rate(self) -> float:
        """The paper's baseline rate T(b_max, 1): the best samples/s one GPU reaches at a
        feasible batch (per GPU at the smallest feasible count when no batch fits one)."""
        best = max((self.rate(b, 1) for b in self.curves), default=0.0)
        if best > 0:
            return best
        per_gpu = [self.rate(b, k) / k for b in self.curves for k in self.gpu_counts(b)]
        return max(per_gpu, default=0.0)

    def equivalent(self, batch: int) -> ThroughputCurve:
        """Speed at ``batch`` in submitted-batch iterations per second, feasible counts
        only: T_its(b, k) * b / submitted."""
        got = self._equiv.get(batch)
        if got is None:
            scale = batch / self.submitted
            pts = {k: self.curves[batch].points[k] * scale for k in self.gpu_counts(batch)}
            if not pts:
                raise ValueError(f"batch {batch} is feasible on no GPU count")
            got = self._equiv[batch] = ThroughputCurve(pts)
        return got


def envelope(brange: BatchRange) -> ThroughputCurve:
    """The best the range reaches at each GPU count, in submitted-batch iterations per
    second: max over feasible batches b of T(b, k) / submitted. A job whose batch follows
    its GPU count (``best_batch``) runs at exactly this curve."""
    got = brange._equiv.get(0)  # key 0: no batch is 0, the envelope's slot in the cache
    if got is None:
        pts: dict[int, float] = {}
        for b in brange.batches:
            for k in brange.gpu_counts(b):
                pts[k] = max(pts.get(k, 0.0), brange.rate(b, k) / brange.submitted)
        got = brange._equiv[0] = ThroughputCurve(pts)
    return got


def best_batch(brange: BatchRange, gpus: int) -> int:
    """The batch of the range with the highest samples/s on ``gpus`` GPUs (ties: the
    smaller batch); the submitted batch where none is feasible there."""
    best, rate = brange.submitted, 0.0
    for b in brange.batches:
        r = brange.rate(b, gpus)
        if r > rate:
            best, rate = b, r
    return best


def make_range(
    rows: Mapping[int, ThroughputCurve],
    low: int,
    high: int,
    submitted: int,
    max_per_gpu: int | None = None,
) -> BatchRange:
    """The range [low, high] over the table ``rows`` of the job's model."""
    curves = {b: c for b, c in rows.items() if low <= b <= high}
    return BatchRange(low, high, submitted, curves, max_per_gpu)


# the rule for traces without a range (the published ElasticFlow traces): from half to twice
# the job's batch size, limited to the rows of its model's throughput table
RANGE_FACTOR = 2


def default_range(rows: Mapping[int, ThroughputCurve], batch: int) -> BatchRange:
    """``[batch / RANGE_FACTOR, batch * RANGE_FACTOR]`` narrowed to the table rows in it
    (the A100 tables have 2-3 rows per model: e.g. resnet50 at 128 gets 64..256)."""
    inside = [b for b in rows if batch // RANGE_FACTOR <= b <= batch * RANGE_FACTOR]
    return make_range(rows, min(inside), max(inside), batch)


def with_default_ranges(jobs: list[Job], tables: Tables) -> list[Job]:
    """Give every job without a range ``default_range`` of its table rows (in place)."""
    for job in jobs:
        rows = tables.get(job.model)
        if job.batch_range is None and rows and job.batch_size in rows:
            job.batch_range = default_range(rows, job.batch_size)
    return jobs


def set_batch(job: Job, batch: int) -> None:
    """Run ``job`` at ``batch`` from now on: its curve becomes that batch's equivalent."""
    if job.batch_range is None:
        raise ValueError(f"job {job.job_id} has no batch-size range")
    job.curve = job.batch_range.equivalent(batch)


def reset_batch(job: Job) -> None:
    """Back to the submitted batch (a new simulation run starts from it)."""
    if job.batch_range is not None:
        job.curve = job.batch_range.equivalent(job.batch_range.submitted)


def hybrid_batch(submitted: int, submitted_gpus: int, low: int, high: int, gpus: int) -> int:
    """The global batch for ``gpus`` GPUs of a job submitted at global batch ``submitted``
    on ``submitted_gpus`` GPUs with the range [``low``, ``high``]: the live allocator's
    rule (Elan, shared/papers/elan.txt, section III).

    Elan's Algorithm 1 prefers weak scaling when GPUs are added (it keeps the per-GPU batch,
    because throughput grows linearly that way) and bounds what the batch does to the
    model; without the strong-scaling optimum ``N_opt`` of line 9 (the live profile has one
    batch only) the rule here is its weak-scaling line 15 within the job's range: the
    per-GPU batch of submission (``submitted / submitted_gpus``) times ``gpus``, never
    above ``high`` nor below ``low`` (so never below the submitted batch at or above
    ``submitted_gpus``), and a multiple of ``gpus`` where the range holds one (equal
    shares), else at least ``gpus`` (every GPU gets a sample) when the range allows it.
    A range that does not reach ``gpus`` gives ``high``; the caller decides whether such a
    placement can run (``Executor.rescale`` refuses it).
    """
    if min(submitted, submitted_gpus, low, gpus) < 1 or high < low:
        raise ValueError(
            f"need positive batches and GPU counts and low <= high, got submitted={submitted} "
            f"on {submitted_gpus} GPUs, range [{low}, {high}], gpus={gpus}"
        )
    per_gpu = max(1, submitted // submitted_gpus)
    want = min(high, max(low, per_gpu * gpus))
    if want % gpus == 0:
        return want
    down = want - want % gpus
    if down >= max(low, gpus):
        return down
    up = down + gpus
    if up <= high:
        return up
    return min(high, max(want, gpus))
