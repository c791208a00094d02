"""Jobs, scaling curves and cluster topology: the vocabulary of ElasticFlow (ASPLOS'23, section 4).

Pure data, no I/O. GPU counts handed out by the allocator are powers of two (buddy placement
needs it, section 4.3), so a curve is consulted mostly at 1, 2, 4, ... A job may carry a
batch-size range (``BatchRange``; what is built from it is in flowcon/alloc/batch.py).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType
from typing import Any


def is_power_of_two(n: int) -> bool:
    return n > 0 and n & (n - 1) == 0


def floor_power_of_two(n: int) -> int:
    """Largest power of two <= n (0 for n < 1)."""
    return 0 if n < 1 else 1 << (int(n).bit_length() - 1)


def powers_of_two(limit: int) -> list[int]:
    """1, 2, 4, ... up to and including ``limit`` when it is one."""
    out: list[int] = []
    g = 1
    while g <= limit:
        out.append(g)
        g <<= 1
    return out


@dataclass(frozen=True)
class ThroughputCurve:
    """Iterations per second of one job (model + global batch size) versus its GPU count.

    ``points`` holds the measured (profiled) counts; missing, zero or NaN entries are simply
    absent. ``at`` is conservative: a count that was not measured gets the throughput of the
    largest measured count below it (workers beyond that are assumed useless), never an
    optimistic interpolation, so admission control never over-promises.
    """

    points: Mapping[int, float]
    measured: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        clean: dict[int, float] = {}
        for g, v in self.points.items():
            if int(g) < 1:
                raise ValueError(f"GPU count must be >= 1, got {g}")
            fv = float(v)
            if math.isfinite(fv) and fv > 0.0:
                clean[int(g)] = fv
        if not clean:
            raise ValueError("throughput curve has no positive finite point")
        object.__setattr__(self, "points", MappingProxyType(dict(sorted(clean.items()))))

    def __deepcopy__(self, memo: dict[int, Any]) -> ThroughputCurve:
        """Immutable (its caches only hold derived values): a deep copy of a policy, as
        the allocator's dry run makes, shares it."""
        return self

    @cached_property
    def _memo(self) -> dict[int, float]:
        """``at`` results (the curve is immutable); not a dataclass field."""
        return dict(self.points)

    def at(self, gpus: int) -> float:
        memo = self._memo
        v = memo.get(gpus)
        if v is None:
            v = memo[gpus] = self._lookup(gpus)
        return v

    def _lookup(self, gpus: int) -> float:
        if gpus <= 0:
            return 0.0
        best_g = 0
        for g in self.points:
            if g <= gpus:
                best_g = g
            else:
                break
        return self.points[best_g] if best_g else 0.0

    def next_faster(self, cur: int, cap: int) -> int | None:
        """Next power-of-two count above ``cur`` (>= 1), at most ``cap``, that is faster."""
        memo = self._steps
        key = (cur, cap)
        if key in memo:
            return memo[key]
        t = self.at(cur)
        n = cur * 2
        out: int | None = None
        while n <= cap:
            if self.at(n) > t * (1.0 + 1e-12):
                out = n
                break
            n *= 2
        memo[key] = out
        return out

    @cached_property
    def _steps(self) -> dict[tuple[int, int], int | None]:
        return {}

    @cached_property
    def tables(self) -> dict[object, object]:
        """Derived tables other modules keep per curve (the allocator's step table); the
        curve is immutable, so they never go stale. Not a dataclass field."""
        return {}

    def best_at_most(self, gpus: int) -> tuple[int, float]:
        """(GPU count actually worth using, its throughput) when up to ``gpus`` power-of-two
        GPUs are available: the smallest power of two reaching the highest throughput."""
        best_n, best_t = 0, 0.0
        for n in powers_of_two(gpus):
            t = self.at(n)
            if t > best_t * (1.0 + 1e-12):
                best_n, best_t = n, t
        return best_n, best_t

    @cached_property
    def max_useful_gpus(self) -> int:
        """Beyond this power of two the job gets no faster (EDF's "as many as it scales")."""
        return self.best_at_most(max(self.points))[0]

    def with_measurement(self, gpus: int, its_per_s: float) -> ThroughputCurve:
        """Refine the curve with a speed reported by the running job.

        The measured count is set exactly; counts never measured directly are rescaled by the
        same ratio (the profile's shape is kept, its level corrected), counts measured before
        are kept as they are.
        """
        if gpus < 1 or not math.isfinite(its_per_s) or its_per_s <= 0.0:
            raise ValueError(f"invalid measurement: {gpus} GPUs, {its_per_s} it/s")
        predicted = self.at(gpus)
        ratio = its_per_s / predicted if predicted > 0 else 1.0
        pts = {g: (v if g in self.measured else v * ratio) for g, v in self.points.items()}
        pts[gpus] = its_per_s
        return ThroughputCurve(pts, self.measured | {gpus})


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


@dataclass
class Job:
    """One training job. ``deadline`` is absolute (same clock as ``submit_time``);
    ``None`` means best-effort. ``done_iterations`` is progress so far, updated by the
    simulator or by the live service from the agent's reports."""

    job_id: str
    submit_time: float
    iterations: float
    deadline: float | None
    curve: ThroughputCurve
    soft_deadline: bool = False
    min_gpus: int = 1
    max_gpus: int | None = None
    requested_gpus: int = 1
    done_iterations: float = 0.0
    model: str = ""
    batch_size: int = 0
    duration: float | None = None  # seconds it ran in the original cluster (trace column)
    # permissible batch sizes (flowcon.alloc.batch); None: the batch is fixed
    batch_range: BatchRange | None = None
    owner: str = ""  # who submitted it (per-user quotas, flowcon/alloc/quota.py)

    @property
    def remaining(self) -> float:
        r = self.iterations - self.done_iterations
        return r if r > 0.0 else 0.0  # max(0.0, r), without the call (a hot path)

    @property
    def is_best_effort(self) -> bool:
        return self.deadline is None

    @property
    def needs_guarantee(self) -> bool:
        """Hard-deadline jobs get a reserved minimum satisfactory share; soft-deadline and
        best-effort jobs only get spare GPUs (section 4.4)."""
        return self.deadline is not None and not self.soft_deadline

    def gpu_cap(self, total_gpus: int) -> int:
        """Largest power-of-two count worth giving this job."""
        cap = min(total_gpus, self.curve.max_useful_gpus)
        if self.max_gpus is not None:
            cap = min(cap, self.max_gpus)
        return floor_power_of_two(cap)


def deadline_order_key(job: Job) -> tuple[float, float, str]:
    """Earliest deadline first (no deadline last), then submission, then id: the order
    EDF, Chronus and the published simulator (its admission and runnable list) take jobs in."""
    return (math.inf if job.deadline is None else job.deadline, job.submit_time, job.job_id)


_SPEC = re.compile(r"^\s*(?:(\d+)\s*[x*]\s*)?(\d+)\s*[x*]\s*(\d+)\s*$")


@dataclass(frozen=True)
class Topology:
    """Switches x nodes per switch x GPUs per node (the published simulator's cluster spec)."""

    nodes_per_switch: int
    gpus_per_node: int
    switches: int = 1

    def __post_init__(self) -> None:
        if min(self.nodes_per_switch, self.gpus_per_node, self.switches) < 1:
            raise ValueError("topology sizes must be >= 1")

    @classmethod
    def from_spec(cls, spec: str) -> Topology:
        """ "16x8" = 16 nodes of 8 GPUs; "2x16x8" = 2 switches of 16 nodes of 8 GPUs."""
        m = _SPEC.match(spec)
        if not m:
            raise ValueError(f"cluster spec {spec!r} is not NODESxGPUS (e.g. 16x8)")
        switches = int(m.group(1)) if m.group(1) else 1
        return cls(int(m.group(2)), int(m.group(3)), switches)

    @property
    def nodes(self) -> int:
        return self.switches * self.nodes_per_switch

    @property
    def total_gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def __str__(self) -> str:
        base = f"{self.nodes_per_switch}x{self.gpus_per_node}"
        return base if self.switches == 1 else f"{self.switches}x{base}"
