"""The published ElasticFlow simulator's loop and planner (``--world published --policy
elasticflow-published``), on cases small enough to check by hand. Its calibration against
the published ratios is in test_published_world.py."""

from __future__ import annotations

import pytest

from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.repro.published_elasticflow import (
    EJob,
    PlanError,
    align,
    merged,
    plan,
    simulate_elasticflow_published,
)

CURVE = ThroughputCurve({1: 1.0, 2: 1.8, 4: 3.0, 8: 4.0})


def _job(
    name: str, submit: float, iters: float, deadline: float, curve: ThroughputCurve = CURVE
) -> Job:
    return Job(
        job_id=name,
        submit_time=submit,
        iterations=iters,
        deadline=deadline,
        curve=curve,
        model="resnet50",
        batch_size=128,
    )


def test_align_and_merge() -> None:
    assert align(0, 0) == 0
    assert align(0, 1) == 60
    assert align(0, 60) == 60
    assert align(30, 100) == 150  # the grid starts at 30
    assert merged({0: 8, 60: 8, 120: 6, 180: 6, 240: 8}) == {0: 8, 120: 6, 240: 8}


def test_minimum_share_on_an_empty_cluster() -> None:
    """600 iterations by 400 s on 8 free GPUs: 1 GPU does 400 (too few), 2 GPUs 720, so
    2 GPUs from now; done after ceil(600 / 1.8) = 334 s, at 360 s on the slot grid; the
    GPUs come back there."""
    ej = EJob.of(_job("a", 0, 600, 400))
    p = plan(ej, 0, {0: 8}, 8)
    assert p.ok
    assert p.alloc == {0: 2}
    assert (p.end, p.real_end) == (360, 334)
    assert p.free == {0: 6, 360: 8}


def test_the_share_is_taken_late_when_the_cluster_is_busy_early() -> None:
    """Only 1 GPU free until 300 s, 8 after: walked back from the deadline, 2 GPUs fit
    from 300 s; before that it holds 1 GPU (the level below)."""
    ej = EJob.of(_job("a", 0, 600, 480))
    p = plan(ej, 0, {0: 1, 300: 8}, 8)
    # 1 GPU fits nowhere (480 its < 600); 2 GPUs from 300 s: 180 s x 1.8 = 324, plus
    # 300 s x 1 GPU before = 624 >= 600
    assert p.ok
    assert p.alloc == {0: 1, 300: 2}
    assert p.real_end == 300 + 167  # ceil((600 - 300) / 1.8)


def test_a_job_that_fits_no_level_is_planned_past_its_deadline() -> None:
    ej = EJob.of(_job("a", 0, 10_000, 100))
    p = plan(ej, 0, {0: 8}, 8)
    assert not p.ok
    assert p.real_end > 100


def test_no_work_left_is_refused() -> None:
    ej = EJob.of(_job("a", 0, 600, 400))
    ej.iter_left = 0
    with pytest.raises(PlanError, match="no work left"):
        plan(ej, 0, {0: 8}, 8)


def test_a_job_without_deadline_is_refused_by_name() -> None:
    j = Job(job_id="be", submit_time=0, iterations=10, deadline=None, curve=CURVE)
    with pytest.raises(ValueError, match="job be"):
        EJob.of(j)


def _met(jobs: list[Job], spec: str) -> dict[str, tuple[bool, bool]]:
    res = simulate_elasticflow_published(jobs, Topology.from_spec(spec))
    return {r.job.job_id: (r.admitted, r.met_deadline) for r in res.results}


def test_arrivals_of_one_event_are_declined_together() -> None:
    """One GPU; two jobs of 100 s with deadline 150 arrive together: both cannot fit, so
    both are declined, although either alone fits. Apart, both are admitted and met."""
    one = ThroughputCurve({1: 1.0})
    together = [_job("a", 0, 100, 150, one), _job("b", 0, 100, 150, one)]
    assert _met(together, "1x1") == {"a": (False, False), "b": (False, False)}
    apart = [_job("a", 0, 100, 150, one), _job("b", 1000, 100, 1150, one)]
    assert _met(apart, "1x1") == {"a": (True, True), "b": (True, True)}


def test_spare_gpus_go_to_the_job_level_by_level() -> None:
    """Alone on 8 GPUs with a loose deadline its minimum share is 1 GPU; the spare GPUs
    then raise it a level at a time (2, 4, 8) while any are left."""
    from flowcon.repro.published_elasticflow import PublishedElasticFlow

    sim = PublishedElasticFlow([_job("a", 0, 3600, 100_000)], Topology.from_spec("1x8"))
    sim._handle(sim.events.items[0], 0.0)
    sim._start_pending(0.0)
    assert sim.ejobs[0].num_gpu == 1
    sim._spare(0.0)
    assert sim.ejobs[0].num_gpu == 8
    assert sim.free == {0: 0, sim.ejobs[0].end_time: 8}


def test_the_published_loop_is_refused_in_our_world(tmp_path: object) -> None:
    from flowcon.sim.cli import SHARED, run_simulation

    trace = SHARED / "data/elasticflow-traces/195job.csv"
    if not trace.is_file():
        pytest.skip("shared traces not present")
    with pytest.raises(ValueError, match="--world published"):
        run_simulation(str(trace), "16x8", "elasticflow-published", world="ours")


def test_more_gpus_than_free_are_refused_by_name() -> None:
    """Where the published code stops on an assertion, the reproduction raises, naming
    the job: 4 GPUs assigned where 2 are free; a free map already overdrawn."""
    ej = EJob.of(_job("a", 0, 600, 400))
    with pytest.raises(PlanError, match="job a: 4 GPUs assigned, 2 free"):
        plan(ej, 0, {0: 2}, 8, assign=4)
    with pytest.raises(PlanError, match="job a: negative free GPUs"):
        plan(ej, 0, {0: 8, 60: -1}, 8)


def test_its_decisions_make_a_timeline() -> None:
    """Alone on 8 GPUs the job gets all 8 at its first decision: cluster efficiency
    (Eq 8) = T(8) / T(1) / 8 GPUs = 4.0 / 1.0 / 8."""
    res = simulate_elasticflow_published([_job("a", 0, 3600, 100_000)], Topology.from_spec("1x8"))
    assert res.timeline[0] == (0, 8, 0.5, 1)
    assert all(busy <= 8 for _, busy, _, _ in res.timeline)
