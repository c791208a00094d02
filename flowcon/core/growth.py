"""Growth efficiency (Eq. 1 and 2) and its per-job normalization.

Raw G = P / R is in "metric units per second per host share": a job whose loss is
in the thousands has a G a thousand times that of a job whose loss is near 1, so one
alpha cannot mean the same for both. We divide each job's G by its own reference G,
the largest G it showed over its first ``reference_intervals`` measured intervals.
The normalized G is therefore "growth efficiency relative to this job's early
growth efficiency": alpha = 5% means "this job now gains less than 5% of what it
gained per unit of CPU when it was young", whatever the metric's scale, and whatever
CPU share the job had then (R cancels its unit). A job never measured yet has
normalized G = 1 by definition, which is what lets a new container in NL take
nearly all of the host in the paper's section 5.3 example.

E(t_i) is the mean of the metric values reported during interval i, and t_i the mean
of their timestamps. Reason: per-minibatch losses are noisy, and the noise's size
does not shrink as a job converges, so |E(t_i) - E(t_{i-1})| of single raw values
would never fall below alpha. The window mean needs no tuning parameter and no
stored history (a running sum and count).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class Window:
    """Running mean of one interval's metric samples (bounded memory)."""

    count: int = 0
    value_sum: float = 0.0
    time_sum: float = 0.0

    def add(self, t: float, value: float) -> None:
        self.count += 1
        self.value_sum += value
        self.time_sum += t

    def mean(self) -> tuple[float, float] | None:
        """(t, E) for the interval, or None without samples."""
        if self.count == 0:
            return None
        return self.time_sum / self.count, self.value_sum / self.count


def progress_rate(e_prev: float, t_prev: float, e_now: float, t_now: float) -> float | None:
    """Eq. 1: P = |E(t_i) - E(t_{i-1})| / (t_i - t_{i-1}); None if the interval is empty."""
    dt = t_now - t_prev
    if dt <= 0 or not (math.isfinite(e_prev) and math.isfinite(e_now)):
        return None
    rate = abs(e_now - e_prev) / dt
    return rate if math.isfinite(rate) else None  # 1e308 - (-1e308) overflows


def growth_efficiency(p: float, r: float, r_floor: float) -> float:
    """Eq. 2: G = P / R, with R (share of host CPU) floored so an idle job cannot divide by ~0."""
    return p / max(r, r_floor)


CPU_WEIGHT = 1.0  # the weight of the CPU share in R; the GPU's is the agent's gpu_weight


def resource_share(cpu: float | None, gpu: float | None, gpu_weight: float) -> float | None:
    """R over several resources: the weighted mean of the shares of the host's CPUs and
    GPUs the job used over the interval,

        R = (w_cpu * r_cpu + w_gpu * r_gpu) / (w_cpu + w_gpu),   w_cpu = 1, w_gpu = gpu_weight,

    for a job measured on a GPU (``gpu`` not None); a CPU-only job keeps R = r_cpu, the
    paper's Eq. 1 exactly. With the CPU figure missing there is no R (None), as before; a
    GPU job's unknown GPU share (``gpu`` None) leaves its R the CPU share. ``gpu_weight`` 0
    turns the GPU term off.
    """
    if cpu is None:
        return None
    if gpu is None or gpu_weight <= 0:
        return cpu
    return (CPU_WEIGHT * cpu + gpu_weight * gpu) / (CPU_WEIGHT + gpu_weight)


@dataclass
class GrowthTracker:
    """Per-container state for computing the normalized G round after round."""

    reference_intervals: int = 3
    r_floor: float = 0.01
    last_point: tuple[float, float] | None = None  # (t, E) of the previous interval
    reference: float = 0.0  # max raw G over the first reference_intervals intervals
    intervals: int = 0
    raw_g: float | None = None
    g: float | None = None  # normalized; None until first measured
    window: Window = field(default_factory=Window)

    def add_sample(self, t: float, value: float) -> None:
        self.window.add(t, value)

    def close_interval(self, cpu_share: float | None) -> float | None:
        """End the interval: returns the new normalized G, or None if it cannot be measured
        (no samples this interval, no previous point, or no CPU figure). ``cpu_share`` is
        the interval's R: the CPU share, or ``resource_share`` for a GPU job."""
        point = self.window.mean()
        self.window = Window()
        if point is None or not math.isfinite(point[1]):
            return None  # no samples, or samples so huge that their sum overflowed
        prev, self.last_point = self.last_point, point
        if prev is None or cpu_share is None:
            return None
        p = progress_rate(prev[1], prev[0], point[1], point[0])
        if p is None:
            return None
        raw = growth_efficiency(p, cpu_share, self.r_floor)
        if not math.isfinite(raw):  # a huge P over a small R: no usable measurement
            return None
        self.raw_g = raw
        if self.intervals < self.reference_intervals:
            self.reference = max(self.reference, raw)
        self.intervals += 1
        self.g = normalize(raw, self.reference)
        return self.g

    def current(self) -> float:
        """The G that Algorithm 1 uses: the last measured one, 1.0 for a job not measured yet."""
        return 1.0 if self.g is None else self.g


MAX_G = 1e9  # a normalized G beyond this (reference ~1e-300) is just "very fast"


def normalize(raw_g: float, reference: float) -> float:
    """G relative to the job's own early G; 0 if the job never progressed at all."""
    if reference <= 0.0:
        return 0.0
    g = raw_g / reference
    return g if math.isfinite(g) else MAX_G
