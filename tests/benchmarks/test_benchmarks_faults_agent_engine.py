"""benchmarks/faults/agent.py's agent-kill scenario on the real engine,
a few kills, and that its checks catch what they are there for (real agent, real
containers; the test label marks them)."""

from __future__ import annotations

import random
import subprocess
import time
from types import ModuleType

import pytest

pytestmark = pytest.mark.docker


def _module() -> ModuleType:
    from benchmarks.faults import agent

    return agent


def test_agent_kill_keeps_originals_limits_and_gives_back(labeled, cleanup_containers):
    faults = _module()
    with faults.agent_kill_session(random.Random(3), labeled()) as (run, final):
        for i in range(3):
            problems, took = run(i)
            assert problems == [], problems
            assert took is not None
            assert took < 30
        # The check sees a limit the agent did not apply (a foreign docker update while
        # the agent is down and its next round not yet run) ...
        sess = run.__self__
        sess.agent.kill()
        steady = sess.containers["m-steady"]
        subprocess.run(["docker", "update", "--cpus", "0.77", steady.id], check=True)
        state, why = sess.agent.read_state()
        assert state is not None, why
        assert any("m-steady" in p for p in sess._applied_mismatch(state))
        # ... and the restarted agent finds it too: someone else's change wins, the
        # container is let go and keeps 0.77 CPUs, even after the final SIGTERM.
        sess.away.add("m-steady")
        t0 = time.time()
        sess.agent.start()
        state, why = sess.wait_round(after=t0)
        assert state is not None, why
        rec = state["containers"][steady.id]
        assert rec["hands_off"]
        assert not rec["managed"]
        assert "NanoCpus" in rec["hands_off"]
        assert final() == []
        steady.reload()
        assert steady.attrs["HostConfig"]["NanoCpus"] == 770_000_000


def test_foreign_update_pause_and_removal_are_survived(labeled, cleanup_containers):
    faults = _module()
    with faults.agent_foreign_change_session(random.Random(11), labeled()) as (run, final):
        for i in range(len(faults.FOREIGN_FAULTS)):  # update, pause, remove
            problems, took = run(i)
            assert problems == [], problems
            assert took is not None
            assert took < 30
        sess = run.__self__
        assert sess.agent.log.read_text().count("foreign change container=") == 1
        assert final() == []


def test_hostile_output_is_read_to_the_end_with_bounded_memory(labeled, cleanup_containers):
    faults = _module()
    with faults.agent_hostile_session(random.Random(0), labeled()) as run:
        problems, took, peak_mb = run(0)
    assert problems == [], problems
    assert took is not None
    assert peak_mb <= faults.RSS_LIMIT_MB


def test_engine_restart_under_the_agent(labeled):
    """On a private dockerd with --live-restore (never the shared engine)."""
    faults = _module()
    from flowcon.testing.private_engine import EngineUnavailable

    try:
        session = faults.agent_engine_restart_session(random.Random(5), labeled())
        with session as (run, final):
            problems, took = run(0)
            assert problems == [], problems
            assert took is not None
            assert took <= faults.RESUME_WITHIN_S
            assert final() == []
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
