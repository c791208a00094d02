"""Eq. 1 and 2 and the per-job normalization that makes alpha scale-free."""

from __future__ import annotations

import math

import pytest

from flowcon.core.growth import GrowthTracker, growth_efficiency, normalize, progress_rate
from flowcon.core.limits import to_cpus


def test_eq1_eq2() -> None:
    assert progress_rate(10.0, 0.0, 6.0, 2.0) == pytest.approx(2.0)
    assert progress_rate(6.0, 0.0, 10.0, 2.0) == pytest.approx(2.0)  # |.|: goal max works too
    assert progress_rate(1.0, 5.0, 0.0, 5.0) is None
    assert growth_efficiency(2.0, 0.5, 0.01) == pytest.approx(4.0)
    assert growth_efficiency(2.0, 0.0, 0.01) == pytest.approx(200.0)  # R floored


def _run(scale: float, curve: list[float], cpu: float = 0.5) -> list[float | None]:
    """Feed one value per second (4 samples per 1 s interval); return normalized G per interval."""
    tr = GrowthTracker(reference_intervals=2)
    out = []
    t = 0.0
    for value in curve:
        for k in range(4):
            tr.add_sample(t + k * 0.25, scale * value)
        t += 1.0
        out.append(tr.close_interval(cpu))
    return out


def test_normalization_is_scale_free() -> None:
    curve = [1 / (1 + i) for i in range(12)]
    small = _run(1.0, curve)
    big = _run(5000.0, curve)
    assert small[0] is None  # no previous point yet
    for a, b in zip(small[1:], big[1:], strict=True):
        assert a == pytest.approx(b)
    assert small[1] == pytest.approx(1.0)
    assert small[-1] is not None
    assert small[-1] < 0.05  # a converging job falls below alpha


def test_normalization_cancels_cpu_share() -> None:
    """A job whose progress halves because its CPU halved keeps the same G."""
    tr = GrowthTracker(reference_intervals=1)
    for t, v in ((0, 100.0), (1, 90.0)):
        tr.add_sample(t, v)
        tr.close_interval(0.5)
    assert tr.g == pytest.approx(1.0)
    tr.add_sample(2, 85.0)  # half the progress ...
    assert tr.close_interval(0.25) == pytest.approx(1.0)  # ... on half the CPU


def test_window_mean_smooths_noise() -> None:
    """Alternating minibatch noise (+-5) around a flat loss gives G ~ 0, not large."""
    tr = GrowthTracker(reference_intervals=1)
    t = 0.0
    for i in range(40):  # steep start sets the reference
        tr.add_sample(t, 100 - 2 * i)
        t += 0.1
        if i % 10 == 9:
            tr.close_interval(0.5)
    for _interval in range(3):
        for k in range(10):
            tr.add_sample(t, 20 + (5 if k % 2 else -5))
            t += 0.1
        g = tr.close_interval(0.5)
    assert g is not None
    assert g < 0.05


def test_unmeasured_job_counts_as_reference() -> None:
    tr = GrowthTracker()
    assert tr.current() == 1.0
    assert tr.close_interval(0.5) is None  # no samples: no G
    assert normalize(3.0, 0.0) == 0.0


def test_to_cpus_bounds() -> None:
    assert to_cpus(0.25, 4).cpus == 1.0
    assert to_cpus(1.0, 4).unlimited
    assert to_cpus(0.25, 4, cpus_max=0.5).cpus == 0.5
    assert to_cpus(0.01, 4, cpus_min=2.0).cpus == 2.0
    assert to_cpus(0.0, 4).cpus == 0.01  # the engine's minimum
    assert to_cpus(0.3, 2).nano_cpus == 600_000_000
    assert not to_cpus(1.0, 4, cpus_max=3).unlimited
    assert to_cpus(float("nan"), 4).unlimited  # a NaN limit (edited state) is "no limit"


def test_huge_finite_values_never_give_a_non_finite_g() -> None:
    """1e308 then -1e308 are finite, but their difference (and a window sum) overflow."""
    tr = GrowthTracker(reference_intervals=1)
    seen = []
    for t, value in enumerate([1.0, 2.0, 1e308, -1e308, 1e308, 1e308, 3.0, 2.0]):
        tr.add_sample(float(t), value)
        if t == 5:
            tr.add_sample(t + 0.5, value)  # a sum of two 1e308 samples is inf
        g = tr.close_interval(0.5)
        seen.append(g)
        assert g is None or math.isfinite(g)
        assert math.isfinite(tr.current())
        assert math.isfinite(tr.reference)
        assert tr.last_point is None or all(map(math.isfinite, tr.last_point))  # JSON-safe
    assert seen[1] == pytest.approx(1.0)  # the reference interval
    assert seen[-1] is not None  # measurements resume once values are sane again
