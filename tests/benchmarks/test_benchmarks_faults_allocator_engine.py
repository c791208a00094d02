"""benchmarks/faults/allocator.py's allocator-kill
scenario on the real engine (a real allocator subprocess, real rate-job containers with the
test label), and that its checks catch what they are there for."""

from __future__ import annotations

import random
from types import ModuleType

import pytest

pytestmark = pytest.mark.docker


def _module() -> ModuleType:
    from benchmarks.faults import allocator

    return allocator


def test_allocator_kill_mid_submit_and_mid_rescale(labeled, docker_client):
    faults = _module()
    with faults.allocator_kill_session(random.Random(2), labeled()) as (run, final):
        for i in range(len(faults.KINDS)):  # submit, rescale
            problems, took = run(i)
            assert problems == [], problems
            assert took is not None
            assert took < 45
        assert final() == []
        # The check sees a second container of a job's rank (a job run twice).
        sess = run.__self__
        job = next(iter(sess._containers()))
        twin = docker_client.containers.run(
            "flowcon/testbox:latest",
            ["sleep", "60"],
            detach=True,
            labels=dict(job.labels),
            network_mode="none",
        )
        try:
            assert any("2 running containers" in p for p in sess.check())
        finally:
            twin.remove(force=True)


def test_engine_restarts_under_the_allocator_use_no_restart_budget(labeled):
    """On a private dockerd (never the shared engine). With max_restarts 1, the second
    restart without --live-restore failed the jobs before the fix ("exit 143; 1 restarts
    used"): an engine stopping the containers is a preemption, not a failure."""
    faults = _module()
    from flowcon.testing.private_engine import EngineUnavailable

    try:
        session = faults.allocator_engine_restart_session(
            random.Random(4), labeled(), max_restarts=1
        )
        with session as run:
            for i in range(4):  # live-restore, plain, live-restore, plain
                problems, took = run(i)
                assert problems == [], problems
                assert took is not None
                assert took < 60
    except EngineUnavailable as exc:
        pytest.skip(str(exc))


def test_a_corrupted_checkpoint_fails_its_job_with_a_clear_reason(labeled):
    faults = _module()
    with faults.allocator_corrupt_checkpoint_session(random.Random(0), labeled()) as run:
        problems, took = run(0)
        assert problems == [], problems
        sess = run.__self__
        reason = sess.client.job(f"{sess.run_id}-v0")["reason"]
    assert "last output: RuntimeError: checkpoint" in reason
    assert "unreadable" in reason
    assert took is not None
    assert took < 90
