"""benchmarks/faults/allocator.py's
allocator-swarm-node-restart scenario on the two-node swarm (node 2's dockerd stopped and
started under a running allocator with the swarm executor)."""

from __future__ import annotations

import random
from types import ModuleType

import pytest

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]


def _module() -> ModuleType:
    from benchmarks.faults import allocator

    return allocator


def test_a_node_restart_resumes_its_job_and_leaves_the_other_alone(swarm, labeled):
    """Before the fix the job on node 2 was reported completed ("all workers exited 0":
    its failed task kept the running status's exit code 0) and its services removed."""
    faults = _module()
    with faults.allocator_swarm_node_restart_session(random.Random(3), labeled()) as run:
        problems, took = run(0)
        assert problems == [], problems
        assert took is not None
        assert took < 60
        sess = run.__self__
        jobs = {j["name"]: j["state"] for j in sess.client.jobs()}
        assert sorted(jobs.values()) == ["running", "running"], jobs
    assert swarm.node2.ping()  # the swarm is up again for the tests after this one
