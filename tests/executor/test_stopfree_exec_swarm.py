"""Stop-free rescale on the two-node swarm: a joiner's service lands on
the other node, the leave signal reaches its container there, and the running service is
never touched. The shell job keeps the executor's half of the contract (exit 144 on
SIGUSR1); skips when the swarm is unavailable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from flowcon import contract
from flowcon.executor.lifecycle import Executor

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import (  # noqa: E402
    ELASTIC_IMAGE,
    host_pids,
    step_job_spec,
    step_metrics,
    swarm_executor_for,
)
from support.waiting import wait_for  # noqa: E402

torch = pytest.importorskip("torch")

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

LEAVER = r"""
trap 'echo left; exit 144' USR1
trap 'exit 143' TERM
echo "role join=${FLOWCON_JOIN:-0} host=${FLOWCON_STORE_HOST:-0} target=${FLOWCON_TARGET_WORLD:-}"
while true; do sleep 0.1 & wait $!; done
"""


@pytest.fixture
def swarm_executor(swarm, labeled, tmp_path: Path):
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 10.0)
    yield ex
    for name in list(ex.jobs()):
        ex.remove(name, grace_s=1.0)


def _containers(client, job: str) -> list[Any]:
    return client.containers.list(  # type: ignore[no-any-return]
        ignore_removed=True, all=True, filters={"label": f"flowcon.job={job}"}
    )


def test_join_on_node2_and_leave_keep_the_first_service(swarm, swarm_executor) -> None:
    ex: Executor = swarm_executor
    spec = step_job_spec("swsf", command=["sh", "-c", LEAVER], scaling="stopfree")
    (host,) = ex.launch(spec, {"node1": ["0"]})
    wait_for(lambda: ex.job("swsf").status == "running", timeout=60)  # type: ignore[union-attr]
    (c0,) = wait_for(lambda: _containers(swarm.manager, "swsf"), timeout=60)
    version = swarm.manager.services.get(host.id).attrs["Version"]["Index"]

    res = ex.rescale(spec, {"node1": ["0"], "node2": ["0"]})
    assert res.mode == "stopfree"
    assert res.joined == ("flowcon-swsf--node2-w1",)
    (c1,) = wait_for(lambda: _containers(swarm.node2, "swsf"), timeout=60)
    env = dict(e.split("=", 1) for e in c1.attrs["Config"]["Env"])
    assert env[contract.ENV_JOIN] == "1"
    assert env[contract.ENV_TARGET_WORLD] == "2"
    assert env["MASTER_PORT"] == host.labels[contract.LABEL_MASTER_PORT]
    wait_for(lambda: ex.job("swsf").status == "running", timeout=60)  # type: ignore[union-attr]

    res = ex.rescale(spec, {"node1": ["0"]})
    assert res.mode == "stopfree", res
    assert res.fallback is None, res
    assert res.left == ("flowcon-swsf--node2-w1",)
    state = ex.job("swsf")
    assert state is not None
    assert [w.id for w in state.workers] == [host.id]
    assert swarm.manager.services.get(host.id).attrs["Version"]["Index"] == version
    c0.reload()
    assert c0.status == "running"
    assert c0.attrs["RestartCount"] == 0


# ---------------------------------------------------------------- the example job, 1-2-4-2-1

ITERATIONS = 700
GBS = 32
SAMPLES = 4096  # images/elastic-example/train.py: 128 steps an epoch at GBS 32


def _reference(client, labels: dict[str, str], out: Path) -> dict[str, Any]:
    """An uninterrupted 1-worker run of the same job (same image, same global batch): its
    final checkpoint."""
    out.mkdir()
    c = client.containers.run(
        ELASTIC_IMAGE,
        ["python3", "/opt/train.py"],
        environment={
            "WORLD_SIZE": "1",
            "RANK": "0",
            "FLOWCON_GLOBAL_BATCH_SIZE": str(GBS),
            "FLOWCON_ITERATIONS": str(ITERATIONS),
            "FLOWCON_CHECKPOINT_DIR": "/ckpt",
            "OMP_NUM_THREADS": "1",
        },
        volumes={str(out): {"bind": "/ckpt", "mode": "rw"}},
        labels=labels,
        detach=True,
    )
    try:
        rc = c.wait(timeout=300)["StatusCode"]
        assert rc == 0, c.logs()[-2000:]
    finally:
        c.remove(force=True)
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=False)  # type: ignore[no-any-return]


@pytest.mark.slow
def test_example_job_1_2_4_2_1_across_the_nodes(
    swarm, swarm_executor, labeled, tmp_path: Path
) -> None:
    """The scale test on the engine: the elastic-example job (its own stop-free
    runtime, torch in the image) goes 1 -> 2 -> 4 -> 2 -> 1 containers mid-epoch, joining
    and leaving on both swarm nodes. The step counter of rank 0 (the store host, never
    restarted) goes on without a gap or a repeat, each epoch's samples are used exactly
    once (rank 0 reports the whole global batch of each step), and the final model equals
    an uninterrupted 1-worker run's within float tolerance."""
    ex: Executor = swarm_executor
    spec = step_job_spec(
        "sw4",
        image=ELASTIC_IMAGE,
        command=["python3", "/opt/train.py"],
        global_batch_size=GBS,
        iterations=ITERATIONS,
        env={"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"},
    )
    assert ex.scaling_of(spec) == "stopfree"
    (_host,) = ex.launch(spec, {"node1": ["0"]})
    wait_for(lambda: len(step_metrics(ex, "sw4")) >= 5, timeout=180)
    (c0,) = _containers(swarm.manager, "sw4")
    started = c0.attrs["State"]["StartedAt"]

    def reach(world: int, steps: int = 20) -> None:
        """Wait until rank 0 ran ``steps`` steps at ``world`` after the last event."""
        begin = len(step_metrics(ex, "sw4"))
        wait_for(
            lambda: (
                sum(m.get("world_size") == world for m in step_metrics(ex, "sw4")[begin:]) >= steps
            ),
            timeout=240,
        )

    def running() -> dict[str, tuple[str, str]]:
        """container name -> (id, StartedAt) on both nodes."""
        out = {}
        for client in (swarm.manager, swarm.node2):
            for c in _containers(client, "sw4"):
                if c.status == "running":
                    out[c.name] = (c.id, c.attrs["State"]["StartedAt"])
        return out

    pids = host_pids(c0)
    events = []
    for placement, world in (
        ({"node1": ["0"], "node2": ["0"]}, 2),  # a joiner on the other node
        ({"node1": ["0", "1"], "node2": ["0", "1"]}, 4),
        ({"node1": ["0"], "node2": ["0"]}, 2),  # one leaver on each node
        ({"node1": ["0"]}, 1),  # the other node's last worker leaves
    ):
        before = running()
        res = ex.rescale(spec, placement)
        assert res.mode == "stopfree", res
        assert res.fallback is None, res
        events.append((res.joined, res.left))
        reach(world)
        after = running()
        # the workers that stay are the same containers, never restarted
        kept = [n for n in before if n.split(".", 1)[0] not in res.left]  # task containers
        for name in kept:
            assert after.get(name) == before[name], (name, before, after)
        assert len(after) == world, after
    assert pids <= host_pids(c0), (pids, host_pids(c0))  # its launcher and worker: same processes
    assert [len(j) for j, _ in events] == [1, 2, 0, 0]
    assert [len(gone) for _, gone in events] == [0, 0, 2, 1]
    assert any("node2" in n for n in events[0][0])
    assert any("node2" in n for n in events[3][1])
    wait_for(lambda: ex.job("sw4").status == "completed", timeout=300)  # type: ignore[union-attr]

    lines = step_metrics(ex, "sw4")
    steps = [m["step"] for m in lines]
    assert steps == list(range(1, ITERATIONS + 1)), "rank 0 restarted or skipped steps"
    worlds = [m["world_size"] for m in lines]
    changes = [w for i, w in enumerate(worlds) if i == 0 or w != worlds[i - 1]]
    assert changes == [1, 2, 4, 2, 1], changes
    by_epoch: dict[int, list[int]] = {}
    for m in lines:
        assert len(m["sample_ids"]) == GBS, m["step"]
        by_epoch.setdefault(m["epoch"], []).extend(m["sample_ids"])
    for epoch, ids in by_epoch.items():
        if len(ids) >= SAMPLES:  # a whole epoch: every sample once
            assert sorted(ids) == list(range(SAMPLES)), epoch
        else:  # the epoch the job ended in: no sample twice
            assert len(set(ids)) == len(ids), epoch
    c0.reload()
    assert c0.attrs["State"]["StartedAt"] == started
    assert c0.attrs["RestartCount"] == 0

    final = torch.load(
        tmp_path / "ckpt" / "sw4" / "checkpoint.pt", map_location="cpu", weights_only=False
    )
    expect = _reference(swarm.manager, labeled(), tmp_path / "ref")
    assert final["step"] == expect["step"] == ITERATIONS
    for k, v in expect["model"].items():
        torch.testing.assert_close(final["model"][k], v, rtol=1e-5, atol=1e-6)
