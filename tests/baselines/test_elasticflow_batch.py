"""elasticflow-batch on a hand-checked trace: a deadline met only at a larger batch."""

from __future__ import annotations

import pytest

from flowcon.alloc.batch import best_batch, envelope, make_range
from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.policy_registry import make_policy
from flowcon.sim.engine import Simulator
from flowcon.sim.world import published_world

# b=4: 10 it/s on 1 GPU (40 samples/s), 18 on 2 (72); b=8: 7 it/s (56 samples/s), 12 on 2
# (96). In submitted (b=4) iterations per second the envelope is 14 on 1 GPU (b=8: 56 / 4)
# and 24 on 2 (96 / 4).
ROWS = {4: ThroughputCurve({1: 10.0, 2: 18.0}), 8: ThroughputCurve({1: 7.0, 2: 12.0})}


def _job(deadline: float) -> Job:
    r = make_range(ROWS, 4, 8, 4)
    return Job("j", 0.0, 1200.0, deadline, r.equivalent(4), batch_size=4, batch_range=r)


def test_envelope_by_hand() -> None:
    r = make_range(ROWS, 4, 8, 4)
    env = envelope(r)
    assert env.at(1) == pytest.approx(14.0)
    assert env.at(2) == pytest.approx(24.0)
    assert best_batch(r, 1) == 8
    assert best_batch(r, 2) == 8
    small = make_range(ROWS, 4, 8, 4, max_per_gpu=4)  # b=8 needs 2 GPUs
    assert envelope(small).at(1) == pytest.approx(10.0)
    assert best_batch(small, 1) == 4


def _run(policy: str, deadline: float, world: str = "ours") -> tuple[bool, float | None]:
    w = published_world(policy) if world == "published" else None
    kw = {"world": w} if w is not None else {}
    res = Simulator([_job(deadline)], Topology(1, 1), make_policy(policy), slot=60.0, **kw).run()  # type: ignore[arg-type]
    r = res.results[0]
    return r.admitted, r.finish


def test_admitted_at_a_larger_batch() -> None:
    # 1 GPU, deadline 100 s: 1200 it at b=4 take 120 s (ElasticFlow declines); at b=8 the
    # 4800 samples take 4800 / 56 = 85.7 s
    assert _run("elasticflow", 100.0)[0] is False
    admitted, finish = _run("elasticflow-batch", 100.0)
    assert admitted
    assert finish == pytest.approx(4800 / 56)
    # a deadline neither meets: both decline
    assert _run("elasticflow-batch", 80.0)[0] is False


def test_published_world_too() -> None:
    assert _run("elasticflow", 100.0, "published")[0] is False
    admitted, finish = _run("elasticflow-batch", 100.0, "published")
    assert admitted
    assert finish is not None
    assert finish <= 100.0
