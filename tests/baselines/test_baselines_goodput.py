"""Pollux (goodput, batch-size adaptation) on small traces checked by hand."""

from __future__ import annotations

import pytest
from support.small_trace import CURVE
from support.small_trace import finishes as _finishes

from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.baselines.goodput import PolluxPolicy, efficiency, goodput_curve

# batch 32 is CURVE; batch 64: 0.6 / 1.0 / 1.6 it/s on 1 / 2 / 4 GPUs
TABLES = {"m": {32: CURVE, 64: ThroughputCurve({1: 0.6, 2: 1.0, 4: 1.6})}}


def _mjob(jid: str, iters: float) -> Job:
    return Job(jid, 0.0, iters, None, CURVE, model="m", batch_size=32)


def test_goodput_curve_picks_the_best_batch_per_gpu_count() -> None:
    # E(64) = (32 + 32) / (32 + 64) = 2/3; batch 64 in batch-32 iterations/s:
    # T64(n) * 64/32 * 2/3 = 0.8, 1.333, 2.133 on 1, 2, 4 GPUs: batch 32 wins on 1 and 2
    assert efficiency(64, 32, 1.0) == pytest.approx(2 / 3)
    g = goodput_curve(_mjob("a", 1), TABLES)
    assert [g.at(n) for n in (1, 2, 4)] == pytest.approx([1.0, 1.5, 1.6 * 4 / 3])
    assert goodput_curve(_mjob("a", 1), None) is CURVE


def test_single_job_adapts_its_batch_on_four_gpus() -> None:
    # alone: 1 GPU, then 1 -> 2 (speedup +0.5 per GPU), 2 -> 4 (+0.633 / 2): 4 GPUs at
    # goodput 2.133 -> 3200 its in 1500 s; with its fixed batch 3200 / 2.0 = 1600 s
    a = _mjob("a", 3200)
    pol = PolluxPolicy(TABLES)
    assert _finishes([a], pol) == {"a": pytest.approx(1500)}
    assert a.curve is CURVE  # its own curve is back when it has finished
    assert _finishes([_mjob("a", 3200)], PolluxPolicy()) == {"a": pytest.approx(1600)}


def test_two_jobs_share_by_marginal_speedup() -> None:
    # each gets 1 GPU, then both 1 -> 2 (+0.5 per GPU, a before b); 2 -> 4 needs 2 more
    # GPUs and none are left: 2 GPUs each at 1.5 -> 3200 / 1.5 = 2133.3 s
    out = _finishes([_mjob("a", 3200), _mjob("b", 3200)], PolluxPolicy(TABLES))
    assert out == {"a": pytest.approx(3200 / 1.5), "b": pytest.approx(3200 / 1.5)}
