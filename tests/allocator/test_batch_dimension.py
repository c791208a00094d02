"""The batch size as a live scaling dimension: the policy (``elasticflow-batch``) plans a
job with a batch range at the batch the executor then runs (one rule,
``flowcon.alloc.batch.best_batch`` over ``flowcon.allocator.records.batch_range_of``), and
the planner counts work in samples (iterations of the submitted batch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flowcon.alloc.batch import best_batch, envelope, live_range, speed_at
from flowcon.alloc.model import ThroughputCurve
from flowcon.allocator.planner import Planner
from flowcon.allocator.records import batch_range_of, core_job, spec_from_dict, spec_to_dict
from flowcon.allocator.store import Store
from flowcon.allocator.target import batch_for
from flowcon.baselines.elasticflow_batch import ElasticFlowBatchPolicy
from flowcon.jobspec.spec import JobSpec, ThroughputProfile

NOW = 1000.0


def spec(name: str = "b", **over: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "name": name,
        "image": "img",
        "command": ("train",),
        "global_batch_size": 16,
        "iterations": 6000,
        "submit_time": NOW,
        "deadline": NOW + 400.0,
        "profile": ThroughputProfile.from_mapping({1: 10.0, 2: 18.0, 4: 30.0}),
        "batch_size_min": 16,
        "batch_size_max": 64,
        # the pre-run measured batch 32 on 4 GPUs: 50 iterations of 16 per second = 800
        # samples/s (25 it/s of 32), above the weak-scaling batch 64 there (30 it/s of 16
        # = 480 samples/s, not measured)
        "batch_profile": {32: {4: 50.0}},
    }
    fields.update(over)
    return JobSpec(**fields)


def planner(tmp_path: Path, total: int = 4) -> Planner:
    store = Store(tmp_path / "s.db")
    return Planner(store, total, 60.0, policy="elasticflow-batch", clock=lambda: NOW)


def test_the_policy_plans_the_batch_the_executor_runs(tmp_path: Path) -> None:
    """Fails where the policy sees no range (it assumes the submitted batch) while the
    executor picks another one (the weak-scaling batch) at the same GPU count."""
    p = planner(tmp_path)
    s = spec()
    assert p.submit(s, NOW).admitted
    plan = p.plan(NOW)
    gpus = plan.allocation["b"]
    assert gpus == 4
    policy = p.policy
    assert isinstance(policy, ElasticFlowBatchPolicy)
    rec = p.store.get_job("b")
    assert rec is not None
    planned = policy.batch_of.get("b", s.global_batch_size)  # no entry: the submitted batch
    run = batch_for(rec.spec, gpus, p.curve(rec))
    assert planned == run == 32
    # the predicted finish is the plan's speed at that batch: 800 samples/s = 50 it/s of 16
    assert rec.predicted_finish == pytest.approx(NOW + 6000 / 50.0)
    p.store.close()


def test_without_measured_batches_the_plan_assumes_the_weak_scaling_batch(
    tmp_path: Path,
) -> None:
    """A range but no batch measured (a submitted profile): the policy's batch is the
    executor's weak-scaling batch (64 on 4 GPUs), not the submitted one it assumed when
    the range never reached it."""
    p = planner(tmp_path)
    s = spec(batch_profile={})
    assert p.submit(s, NOW).admitted
    gpus = p.plan(NOW).allocation["b"]
    rec = p.store.get_job("b")
    assert rec is not None
    planned = getattr(p.policy, "batch_of", {}).get("b", s.global_batch_size)
    assert planned == batch_for(rec.spec, gpus) == 16 * gpus
    p.store.close()


def test_progress_is_counted_in_samples_at_the_batch_used(tmp_path: Path) -> None:
    p = planner(tmp_path)
    assert p.submit(spec(), NOW).admitted
    p.plan(NOW)
    rec = p.store.get_job("b")
    assert rec is not None
    assert rec.gpus == 4
    assert p.speed(rec) == pytest.approx(50.0)  # not the curve's 30 at the submitted batch
    p.advance(NOW + 10.0)
    rec = p.store.get_job("b")
    assert rec is not None
    assert rec.done_iterations == pytest.approx(500.0)  # 8000 samples / 16
    p.store.close()


def test_without_measured_batches_the_range_follows_weak_scaling() -> None:
    """No other batch measured: every cell is the weak-scaling batch at the curve's
    samples/s, so the plan's speed is the curve's and the batch the old rule's."""
    s = spec(batch_profile={})
    curve = ThroughputCurve(s.profile.as_dict())  # type: ignore[union-attr]
    brange = batch_range_of(s, curve)
    assert brange is not None
    assert [best_batch(brange, k) for k in (1, 2, 4)] == [16, 32, 64]
    assert [batch_for(s, k, curve) for k in (1, 2, 4)] == [16, 32, 64]
    job = core_job(s, curve)
    assert job.batch_range is not None
    assert dict(envelope(job.batch_range).points) == pytest.approx(dict(curve.points))


def test_the_largest_local_batch_bounds_the_range() -> None:
    """A per-worker batch of at most 8 fits: 4 GPUs run 32, not 64."""
    curve = ThroughputCurve({1: 10.0, 2: 18.0, 4: 30.0})
    brange = live_range(curve, 16, 1, 16, 64, max_per_gpu=8)
    assert best_batch(brange, 4) == 32
    s = spec(batch_profile={}, max_local_batch=8)
    assert batch_for(s, 4, curve) == 32


def test_the_pre_run_results_are_stored_with_the_spec() -> None:
    s = spec(max_local_batch=24)
    back = spec_from_dict(spec_to_dict(s))
    assert back.batch_profile == {32: {4: 50.0}}
    assert back.max_local_batch == 24
    old = spec_to_dict(spec())
    del old["batch_profile"], old["max_local_batch"]
    assert spec_from_dict(old).batch_profile == {}


def test_the_closed_loop_moves_the_speed_never_the_batch() -> None:
    """Measured at 4 GPUs (where it runs at batch 32) far slower than the pre-run said:
    the batch there stays 32 (no second opinion under a running job), its speed is the
    measured one, for the plan and the executor alike."""
    s = spec()
    base = ThroughputCurve(s.profile.as_dict())  # type: ignore[union-attr]
    slow = base.with_measurement(4, 20.0)  # 320 samples/s, below the weak 64's 480
    brange = batch_range_of(s, slow)
    assert brange is not None
    assert best_batch(brange, 4) == batch_for(s, 4, slow) == 32
    assert speed_at(brange, 4) == pytest.approx(20.0)
    assert dict(envelope(brange).points)[4] == pytest.approx(20.0)
    # unmeasured counts keep the weak-scaling batch at the corrected profile's speed
    assert best_batch(brange, 2) == 32
    assert speed_at(brange, 2) == pytest.approx(slow.at(2))
