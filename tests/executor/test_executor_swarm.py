"""The swarm backend on the two-node swarm of scripts/swarm-up.sh (skips when unavailable)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from flowcon.executor.lifecycle import Executor

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import step_job_spec, swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]


def _env(c) -> dict[str, str]:
    return dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])


def _job_containers(client, job: str) -> list[Any]:
    return client.containers.list(  # type: ignore[no-any-return]
        ignore_removed=True, all=True, filters={"label": f"flowcon.job={job}"}
    )


@pytest.fixture
def swarm_executor(swarm, labeled, tmp_path: Path):
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 10.0)
    yield ex
    for name in list(ex.jobs()):
        ex.remove(name, grace_s=1.0)


def test_service_lands_on_requested_node_with_env(swarm, swarm_executor) -> None:
    ex: Executor = swarm_executor
    spec = step_job_spec("swone")
    (w,) = ex.launch(spec, {"node2": ["1"]})
    svc = swarm.manager.services.get(w.id)
    constraints = svc.attrs["Spec"]["TaskTemplate"]["Placement"]["Constraints"]
    assert constraints == ["node.labels.flowcon.node==node2"]
    assert svc.attrs["Spec"]["TaskTemplate"]["RestartPolicy"]["Condition"] == "none"
    wait_for(lambda: _job_containers(swarm.node2, "swone"), timeout=60)
    assert _job_containers(swarm.manager, "swone") == []  # not on node 1
    (c,) = _job_containers(swarm.node2, "swone")
    env = _env(c)
    assert env["FLOWCON_GPUS"] == "FAKE-node2-1"
    assert env["WORLD_SIZE"] == "1"
    # the swarm's address of node 2 (on one machine Swarm reports the source address seen
    # by the manager, 127.0.0.1; both "nodes" share the host network namespace anyway)
    node2_addr = swarm.manager.nodes.get(swarm.nodes["node2"]).attrs["Status"]["Addr"]
    assert env["MASTER_ADDR"] == node2_addr
    assert env["FLOWCON_NODE"] == "node2"
    assert c.labels["flowcon.rank"] == "0"
    assert "flowcon.test" in c.labels
    wait_for(lambda: ex.job("swone").status == "running", timeout=60)  # type: ignore[union-attr]
    # adoption: a second executor on the same swarm sees the job and does not duplicate it
    again = Executor(ex.backend, ex.inventory, ex.options).launch(spec, {"node2": ["1"]})
    assert [x.id for x in again] == [w.id]


def test_two_node_job_then_rescale_onto_one_node(swarm, swarm_executor) -> None:
    ex: Executor = swarm_executor
    spec = step_job_spec("swtwo")
    ex.launch(spec, {"node1": ["0"], "node2": ["0", "1"]})
    wait_for(lambda: ex.job("swtwo").status == "running", timeout=60)  # type: ignore[union-attr]
    (c1,) = _job_containers(swarm.manager, "swtwo")
    (c2,) = _job_containers(swarm.node2, "swtwo")
    e1, e2 = _env(c1), _env(c2)
    assert (e1["RANK"], e2["RANK"]) == ("0", "1")
    assert e2["LOCAL_WORLD_SIZE"] == "2"
    assert e1["MASTER_ADDR"] == e2["MASTER_ADDR"] == "127.0.0.1"  # rank 0 is on node 1
    assert e1["WORLD_SIZE"] == "3"
    assert c1.attrs["HostConfig"]["NetworkMode"] == "host"

    def steps() -> int:
        found = [
            int(m.group(1)) for ln in ex.logs("swtwo") if (m := re.match(r'\{"step":(\d+)', ln))
        ]
        return max(found, default=0)

    wait_for(lambda: steps() >= 3, timeout=60)
    res = ex.rescale(spec, {"node2": ["0"]})
    assert (res.old_gpus, res.new_gpus) == (3, 1)
    assert res.stop_seconds < 8.0
    wait_for(lambda: ex.job("swtwo").status == "running", timeout=60)  # type: ignore[union-attr]
    starts = wait_for(
        lambda: [ln for ln in ex.logs("swtwo") if ln.startswith("start ")], timeout=30
    )
    # the shared checkpoint dir carried the step from node 1's rank 0 to node 2
    assert int(starts[-1].rsplit("from=", 1)[1]) >= 3
    assert _job_containers(swarm.manager, "swtwo") == [] or all(
        c.status != "running" for c in _job_containers(swarm.manager, "swtwo")
    )


@pytest.mark.slow
def test_gloo_ddp_across_the_two_nodes(swarm, swarm_executor) -> None:
    """The elastic-example image trains with DDP over gloo with rank 0 on node 1 and rank 1
    on node 2 (host networking), then is rescaled onto 2 GPUs of node 2 and continues."""
    import json

    image = "flowcon/elastic-example:latest"
    for client in (swarm.manager, swarm.node2):
        try:
            client.images.get(image)
        except Exception:
            pytest.skip(
                f"{image} not on both nodes (scripts/swarm-up.sh flowcon/testbox:latest {image})"
            )
    ex: Executor = swarm_executor
    spec = step_job_spec(
        "swddp",
        image=image,
        command=["python3", "/opt/train.py"],
        global_batch_size=32,
        env={"STEP_SLEEP": "0.05"},
        scaling="restart",  # the image declares stop-free: this test is checkpoint-restart
    )

    def metrics() -> list[dict[str, Any]]:
        return [json.loads(ln) for ln in ex.logs("swddp") if ln.startswith('{"step"')]

    ex.launch(spec, {"node1": ["0"], "node2": ["0"]})
    first = wait_for(lambda: [m for m in metrics() if "loss" in m][:3], timeout=120)
    assert all(m["world_size"] == 2 and m["local_batch"] == 16 for m in first)
    before = max(m["step"] for m in metrics())
    res = ex.rescale(spec, {"node2": ["0", "1"]})
    assert res.new_gpus == 2
    after = wait_for(lambda: [m for m in metrics() if "loss" in m], timeout=120)
    assert after[0]["step"] > before
    assert after[0]["world_size"] == 2  # resumed, 2 workers
