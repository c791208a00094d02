"""What a job reaches on the Swarm backend, where its worker runs on another node: a spec
naming no user runs as nobody there, its fresh checkpoint volume handed to that user on
that node before the swarm starts it; a host path that leaves its allowed root through a
symbolic link is refused on that node (executor.node_hosts gives its engine)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from flowcon.executor.backend import ExecutorRefused
from flowcon.executor.lifecycle import Executor
from flowcon.executor.reach import Reach

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import step_job_spec, swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]


@pytest.fixture
def executor(swarm, labeled, tmp_path: Path):
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 2.0)
    # named checkpoint volumes, node-local: the one on node2 is prepared on node2
    ex.options = replace(
        ex.options, checkpoint_host_dir=None, reach=Reach(bind_roots=(str(tmp_path / "data"),))
    )
    yield ex
    for name in list(ex.jobs()):
        ex.remove(name, grace_s=1.0)


def _node2_container(swarm, name: str):
    found = swarm.node2.containers.list(
        ignore_removed=True, filters={"label": f"flowcon.job={name}"}
    )
    return found[0] if found else None


def test_a_job_runs_as_nobody_on_another_node_and_writes_its_checkpoint(
    swarm, executor, test_run_id
) -> None:
    ex: Executor = executor
    name = f"swn{test_run_id}"
    (w,) = ex.launch(step_job_spec(name), {"node2": ["0"]})
    cspec = swarm.manager.services.get(w.id).attrs["Spec"]["TaskTemplate"]["ContainerSpec"]
    assert cspec["User"] == "65534:65534"
    assert cspec["CapabilityDrop"] == ["ALL"]
    c = wait_for(lambda: _node2_container(swarm, name), 60)
    assert c.attrs["Config"]["User"] == "65534:65534"

    def owner() -> str | None:
        code, out = c.exec_run(["sh", "-c", "stat -c %u:%g /flowcon/checkpoint/step"])
        return out.decode().strip() if code == 0 else None

    assert wait_for(owner, 60) == "65534:65534"  # it could write its checkpoint


def test_a_symlink_out_of_an_allowed_root_is_refused_on_the_workers_node(
    swarm, executor, tmp_path, test_run_id
) -> None:
    ex: Executor = executor
    data = tmp_path / "data"
    (data / "sets").mkdir(parents=True)
    (data / "sets" / "etc").symlink_to("/etc")
    name = f"sws{test_run_id}"
    spec = step_job_spec(name, volumes=[f"{data}/sets/etc:/d:ro"])
    with pytest.raises(ExecutorRefused, match="leads outside its allowed root"):
        ex.launch(spec, {"node2": ["0"]})
    assert not swarm.manager.services.list(filters={"label": f"flowcon.job={name}"})
    # a node with no engine address: no host path is mounted there at all
    ex.backend.node_clients.clear()  # type: ignore[attr-defined]
    ok = step_job_spec(f"swo{test_run_id}", volumes=[f"{data}/sets:/d:ro"])
    with pytest.raises(ExecutorRefused, match="cannot be checked on node node2"):
        ex.launch(ok, {"node2": ["0"]})
