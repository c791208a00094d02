"""Batch-size ranges and T(b, k) from the throughput tables."""

from __future__ import annotations

import copy

import pytest

from flowcon.alloc.batch import (
    default_range,
    make_range,
    reset_batch,
    set_batch,
    throughput,
    with_default_ranges,
)
from flowcon.alloc.model import Job, ThroughputCurve

ROWS = {
    32: ThroughputCurve({1: 10.0, 2: 18.0, 4: 30.0}),
    64: ThroughputCurve({1: 6.0, 2: 11.0, 4: 20.0}),
    128: ThroughputCurve({1: 3.0, 2: 6.0, 4: 11.0}),
    512: ThroughputCurve({1: 1.0}),
}


def test_throughput_is_samples_per_second() -> None:
    tables = {"m": ROWS}
    assert throughput(tables, "m", 64, 2) == pytest.approx(11.0 * 64)
    assert throughput(tables, "m", 64, 8) == 0.0  # not measured
    assert throughput(tables, "m", 48, 1) == 0.0  # no such row
    assert throughput(tables, "x", 64, 1) == 0.0


def test_default_range_is_half_to_twice_within_the_table() -> None:
    r = default_range(ROWS, 64)
    assert (r.low, r.high, r.submitted, r.batches) == (32, 128, 64, (32, 64, 128))
    assert default_range(ROWS, 512).batches == (512,)  # 256..1024 holds only its own row


def test_feasibility_and_rates() -> None:
    r = make_range(ROWS, 32, 128, 64, max_per_gpu=32)
    assert r.feasible(32, 1)
    assert not r.feasible(64, 1)
    assert r.feasible(64, 2)
    assert r.gpu_counts(128) == [4]
    assert r.rate(128, 2) == 0.0
    assert r.rate(128, 4) == pytest.approx(11.0 * 128)
    assert r.base_rate() == pytest.approx(320.0)  # only b=32 fits one GPU


def test_equivalent_curve_keeps_submitted_iterations() -> None:
    r = make_range(ROWS, 32, 128, 64)
    eq = r.equivalent(128)  # 11 it/s of 128 samples on 4 GPUs = 22 it/s of 64 samples
    assert eq.at(4) == pytest.approx(22.0)
    assert r.equivalent(64).at(2) == pytest.approx(11.0)
    job = Job("j", 0.0, 100.0, None, r.equivalent(64), batch_size=64, batch_range=r)
    set_batch(job, 128)
    assert job.curve.at(4) == pytest.approx(22.0)
    reset_batch(job)
    assert job.curve.at(4) == pytest.approx(20.0)
    assert copy.deepcopy(job).batch_range is r


@pytest.mark.parametrize(
    ("low", "high", "sub", "match"),
    [(0, 64, 32, "batch_size_min"), (64, 32, 32, "batch_size_max"), (32, 64, 128, "outside")],
)
def test_bad_ranges_name_the_field(low: int, high: int, sub: int, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make_range(ROWS, low, high, sub)


def test_with_default_ranges_skips_jobs_that_have_one() -> None:
    own = make_range(ROWS, 64, 64, 64)
    a = Job("a", 0.0, 1.0, None, ROWS[32], model="m", batch_size=32)
    b = Job("b", 0.0, 1.0, None, ROWS[64], model="m", batch_size=64, batch_range=own)
    with_default_ranges([a, b], {"m": ROWS})
    assert a.batch_range is not None
    assert a.batch_range.batches == (32, 64)
    assert b.batch_range is own
    with pytest.raises(ValueError, match="no batch-size range"):
        set_batch(Job("c", 0.0, 1.0, None, ROWS[32]), 64)
