"""The generated Saxena workload: seeded, arrival patterns, categories."""

from __future__ import annotations

import pytest

from flowcon.alloc.model import ThroughputCurve
from flowcon.sim.saxena_workload import (
    CATEGORIES,
    arrival_rate,
    base_rate_per_minute,
    saxena_workload,
)

ROW = {1: 4.0, 2: 7.0, 4: 12.0, 8: 20.0}
TABLES = {
    c.model: {b: ThroughputCurve({k: v * 64 / b for k, v in ROW.items()}) for b in (64, 128, 256)}
    for c in CATEGORIES
}


def test_seeded_and_deterministic() -> None:
    a = saxena_workload(TABLES, pattern="bursty", gpus=40, seed=5)
    b = saxena_workload(TABLES, pattern="bursty", gpus=40, seed=5)
    c = saxena_workload(TABLES, pattern="bursty", gpus=40, seed=6)
    key = [(j.job_id, j.submit_time, j.model, j.batch_size, j.iterations) for j in a]
    assert key == [(j.job_id, j.submit_time, j.model, j.batch_size, j.iterations) for j in b]
    assert key != [(j.job_id, j.submit_time, j.model, j.batch_size, j.iterations) for j in c]


def test_rates_by_pattern() -> None:
    lam = base_rate_per_minute()
    assert lam == pytest.approx(1 / 26.25)
    assert arrival_rate("high", 10, 40, 1.0, 60) == pytest.approx(40 * lam)
    assert arrival_rate("low", 10, 40, 1.0, 60) == pytest.approx(10 * lam)
    assert arrival_rate("bursty", 10, 40, 1.0, 60) == pytest.approx(40 * lam)
    assert arrival_rate("bursty", 70, 40, 1.0, 60) == pytest.approx(10 * lam)
    # many seeds: counts near the expected 40*lam*240 = 366 (high), 91 (low), 229 (bursty)
    for pattern, expect in (("high", 365.7), ("low", 91.4), ("bursty", 228.6)):
        n = sum(len(saxena_workload(TABLES, pattern=pattern, gpus=40, seed=s)) for s in range(20))
        assert n / 20 == pytest.approx(expect, rel=0.08)


def test_bursty_arrivals_follow_the_phases() -> None:
    jobs = saxena_workload(TABLES, pattern="bursty", gpus=400, minutes=480, period=120, seed=1)
    high = sum(1 for j in jobs if (j.submit_time // 7200) % 2 == 0)
    assert high > 3 * (len(jobs) - high)  # 4x the rate in the high phases


def test_jobs_carry_ranges_and_lengths() -> None:
    jobs = saxena_workload(TABLES, pattern="high", gpus=40, seed=2)
    for j in jobs:
        assert j.batch_range is not None
        assert j.deadline is None
        cat = next(c for c in CATEGORIES if c.model == j.model)
        assert j.batch_range.low == cat.low
        assert j.batch_size in j.batch_range.batches
        one_gpu = j.iterations * j.batch_size / j.batch_range.base_rate()
        assert one_gpu == pytest.approx(cat.minutes * 60)
    fixed = [j for j in jobs if j.model == "inception3"]
    assert fixed
    assert all(j.min_gpus == j.max_gpus == 2 for j in fixed)


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="pattern"):
        saxena_workload(TABLES, pattern="spiky", gpus=40)
    with pytest.raises(ValueError, match="resnet50"):
        saxena_workload({}, pattern="low", gpus=40)
