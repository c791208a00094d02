"""Stop-free rescale on the two-node swarm (issue 10 item 7): a joiner's service lands on
the other node, the leave signal reaches its container there, and the running service is
never touched. The shell job keeps the executor's half of the contract (exit 144 on
SIGUSR1); skips when the swarm is unavailable."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcon import contract
from flowcon.service.executor import Executor

pytest.register_assert_rewrite("swarm_fixtures")  # it is also loaded as a plugin below
from swarm_fixtures import step_job_spec, swarm_executor_for, wait_for  # noqa: E402

pytest_plugins = ("swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

LEAVER = r"""
trap 'echo left; exit 144' USR1
trap 'exit 143' TERM
echo "role join=${FLOWCON_JOIN:-0} host=${FLOWCON_STORE_HOST:-0} target=${FLOWCON_TARGET_WORLD:-}"
while true; do sleep 0.1 & wait $!; done
"""


@pytest.fixture
def swarm_executor(swarm, labeled, tmp_path: Path):  # type: ignore[no-untyped-def]
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 10.0)
    yield ex
    for name in list(ex.jobs()):
        ex.remove(name, grace_s=1.0)


def _containers(client, job: str) -> list:  # type: ignore[no-untyped-def, type-arg]
    return client.containers.list(all=True, filters={"label": f"flowcon.job={job}"})


def test_join_on_node2_and_leave_keep_the_first_service(swarm, swarm_executor) -> None:  # type: ignore[no-untyped-def]
    ex: Executor = swarm_executor
    spec = step_job_spec("swsf", command=["sh", "-c", LEAVER], scaling="stopfree")
    (host,) = ex.launch(spec, {"node1": ["0"]})
    wait_for(lambda: ex.job("swsf").status == "running", timeout=60)  # type: ignore[union-attr]
    (c0,) = wait_for(lambda: _containers(swarm.manager, "swsf"), timeout=60)
    version = swarm.manager.services.get(host.id).attrs["Version"]["Index"]

    res = ex.rescale(spec, {"node1": ["0"], "node2": ["0"]})
    assert res.mode == "stopfree" and res.joined == ("flowcon-swsf--node2-w1",)
    (c1,) = wait_for(lambda: _containers(swarm.node2, "swsf"), timeout=60)
    env = dict(e.split("=", 1) for e in c1.attrs["Config"]["Env"])
    assert env[contract.ENV_JOIN] == "1" and env[contract.ENV_TARGET_WORLD] == "2"
    assert env["MASTER_PORT"] == host.labels[contract.LABEL_MASTER_PORT]
    wait_for(lambda: ex.job("swsf").status == "running", timeout=60)  # type: ignore[union-attr]

    res = ex.rescale(spec, {"node1": ["0"]})
    assert res.mode == "stopfree" and res.fallback is None, res
    assert res.left == ("flowcon-swsf--node2-w1",)
    state = ex.job("swsf")
    assert state is not None and [w.id for w in state.workers] == [host.id]
    assert swarm.manager.services.get(host.id).attrs["Version"]["Index"] == version
    c0.reload()
    assert c0.status == "running" and c0.attrs["RestartCount"] == 0
