"""Saxena's metrics from a hand-checked simulation."""

from __future__ import annotations

import pytest

from flowcon.alloc.batch import make_range
from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.policy_registry import make_policy
from flowcon.sim.engine import Simulator
from flowcon.sim.saxena_metrics import completed_over_time, saxena_metrics


def _job(jid: str, submit: float) -> Job:
    # b=4: 10 it/s on 1 GPU (40 samples/s), 16 it/s on 2 (64 samples/s)
    r = make_range({4: ThroughputCurve({1: 10.0, 2: 16.0})}, 4, 4, 4)
    return Job(jid, submit, 1200.0, None, r.equivalent(4), batch_size=4, batch_range=r)


def test_metrics_by_hand() -> None:
    # 2 GPUs. a at 0 alone: 2 GPUs, 1200 it / 16 = 75 s. b and c at 60: the DP admits b
    # (a keeps 1 GPU, b 1), c is dropped (no third GPU).
    jobs = [_job("a", 0.0), _job("b", 60.0), _job("c", 60.0)]
    res = Simulator(jobs, Topology(1, 2), make_policy("saxena-dp"), slot=60.0).run()
    out = {r.job.job_id: r for r in res.results}
    # a: 960 it by 60 s, then 1 GPU: 240 / 10 = 24 s -> 84 s; b: 1 GPU from 60 s until the
    # decision at 120 s (600 it), then 2 GPUs: 600 / 16 = 37.5 s -> 157.5 s
    assert out["a"].finish == pytest.approx(84.0)
    assert out["b"].finish == pytest.approx(157.5)
    assert not out["c"].admitted
    m = saxena_metrics(res)
    assert m["jobs"] == 3
    assert m["completed"] == 2
    assert m["drop_ratio"] == pytest.approx(1 / 3, abs=1e-4)
    # single-GPU time 120 s each; held: a 2*60 + 1*24 = 144, b 1*60 + 2*37.5 = 135
    assert m["sjs_efficiency"] == pytest.approx(240 / 279, abs=1e-4)
    assert m["avg_jct_min"] == pytest.approx((84 + 97.5) / 2 / 60, abs=0.01)
    assert completed_over_time(res, 60.0) == [(0.0, 0), (60.0, 0), (120.0, 1), (180.0, 2)]
    assert saxena_metrics(res, horizon=100.0)["completed"] == 1
