"""A node whose engine cannot apply no-new-privileges to services (both engines of the
test swarm are 20.10, API 1.41) gets no job without the operator's allowance; with it the
job runs there and the gap is reported (flowcon/executor/hardening.py)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from flowcon.executor.backend import ExecutorRefused
from flowcon.executor.backends.swarm import SwarmBackend

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import step_job_spec, swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]


def test_a_weak_node_gets_jobs_only_with_the_operators_allowance(
    swarm, labeled, tmp_path: Path, test_run_id, caplog
) -> None:
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 2.0)
    backend = ex.backend
    assert isinstance(backend, SwarmBackend)
    name = f"swh{test_run_id}"
    try:
        backend.allow_weak_hardening = False
        with pytest.raises(ExecutorRefused, match=r"node node2: Engine API 1\.41 cannot apply"):
            ex.launch(step_job_spec(name), {"node2": ["0"]})
        assert not swarm.manager.services.list(filters={"label": f"flowcon.job={name}"})
        view = {h.node: h for h in backend.hardening()}
        assert view["node2"].missing == ("no-new-privileges",)
        assert not view["node2"].allowed

        allowing = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 2.0)
        with caplog.at_level(logging.WARNING, logger="flowcon.executor.backends.swarm"):
            allowing.launch(step_job_spec(name), {"node2": ["0"]})
        assert any("node node2: Engine API 1.41" in r.getMessage() for r in caplog.records)
        assert wait_for(lambda: allowing.job(name) and allowing.job(name).status == "running", 90)
    finally:
        for job in list(ex.jobs()):
            ex.remove(job, grace_s=1.0)
