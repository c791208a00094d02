"""The stop-free job's coordinator on the real engine (the elastic-example image on
flowcon.elastic's runtime, real torch): the container hosting it leaves in a scale-in, is
killed, or the whole job migrates to other GPUs, and the job goes on without a restart.
Every container's output is followed while it lives (the executor removes a container
that left), so the step lines of all ranks 0 are checked together: the step counter goes
on, each sample is used once per epoch."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from flowcon.executor.lifecycle import Executor

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.follow import Follow, exactly_once  # noqa: E402
from support.swarm_fixtures import step_job_spec  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)

REPO = Path(__file__).resolve().parents[2]
IMAGE = "flowcon/elastic-example:coordinator-test"
GBS = 32
SAMPLES = 4096  # train.py's data set


@pytest.fixture(scope="module")
def example_image() -> str:
    """This checkout's example image under its own tag, built once for the module
    (``FLOWCON_TEST_PREBUILT_IMAGE=1``: the tag as it is, built beforehand)."""
    if os.environ.get("FLOWCON_TEST_PREBUILT_IMAGE") == "1":
        return IMAGE
    build = REPO / "images" / "elastic-example" / "build.sh"
    res = subprocess.run(["bash", str(build), IMAGE], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    return IMAGE


def _spec(name: str) -> Any:
    return step_job_spec(
        name,
        image=IMAGE,
        command=["python3", "/opt/train.py"],
        global_batch_size=GBS,
        env={"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"},
    )


def _exactly_once(lines: list[dict[str, Any]]) -> None:
    exactly_once(lines, GBS, SAMPLES)


def _started(client: Any, name: str) -> tuple[str, int]:
    c = client.containers.get(name)
    return c.attrs["State"]["StartedAt"], c.attrs["RestartCount"]


@pytest.mark.docker
@pytest.mark.slow
def test_the_coordinators_container_leaves_in_a_scale_in(
    executor: Executor, docker_client, example_image: str
) -> None:
    """2 -> 1 removing container 0 (the coordinator's): no restart; w1 takes coordination
    over at the switch, in a later rendezvous generation, and trains on alone."""
    spec = _spec("sfcl")
    executor.launch(spec, {"node1": ["0", "1"]})
    logs = Follow(docker_client, "sfcl")
    wait_for(lambda: logs.at(2) >= 5, 180)
    w1 = "flowcon-sfcl--node1-w1"
    before = _started(docker_client, w1)
    res = executor.rescale(spec, {"node1": ["1"]})
    assert res.mode == "stopfree", res
    assert res.fallback is None, res
    assert res.left == ("flowcon-sfcl--node1-w0",)
    wait_for(lambda: logs.at(1) >= 10, 120)
    scaled = [s for s in logs.events("scaled") if s.get("left")]
    assert len(scaled) == 1, scaled
    assert scaled[0]["coordinator_moved"] is True
    assert scaled[0]["world_size"] == 1
    assert scaled[0]["gen"] > 0  # a later generation than the launch's (0)
    assert scaled[0]["coordinator"].startswith(w1 + ":")
    steps = [m["step"] for m in logs.steps()]
    assert steps == list(range(steps[0], steps[-1] + 1)), steps  # no restart, none twice
    _exactly_once(logs.steps())
    assert _started(docker_client, w1) == before  # never restarted
    found = docker_client.containers.list(
        ignore_removed=True, filters={"label": "flowcon.job=sfcl"}
    )
    names = [c.name for c in found]
    assert names == [w1]
    # a joiner now reaches the new coordinator
    out = executor.rescale(spec, {"node1": ["1", "2"]})
    assert out.mode == "stopfree", out
    seen = len(logs.steps())
    wait_for(lambda: logs.at(2, seen) >= 5, 180)
    steps = [m["step"] for m in logs.steps()]
    assert steps == list(range(steps[0], steps[-1] + 1)), steps


@pytest.mark.docker
@pytest.mark.slow
def test_the_coordinators_container_is_killed_the_survivor_goes_on(
    executor: Executor, docker_client, example_image: str
) -> None:
    """``docker kill`` of container 0 (the coordinator's launcher and worker): the
    survivor elects its own store, recovers from its in-memory state and trains on (no
    restart); reconcile reports the lost container and why the job goes on, and the next
    round's joiner finds the elected coordinator."""
    spec = _spec("sfck")
    placement = {"node1": ["0", "1"]}
    executor.launch(spec, placement)
    logs = Follow(docker_client, "sfck")
    wait_for(lambda: logs.at(2) >= 5, 180)
    w1 = "flowcon-sfck--node1-w1"
    before = _started(docker_client, w1)
    docker_client.containers.get("flowcon-sfck--node1-w0").kill()  # SIGKILL
    wait_for(lambda: logs.at(1) >= 10, 90)
    (rec,) = logs.events("recovered")
    assert rec["coordinator_elected"] is True, rec
    assert rec["world_size"] == 1, rec
    assert rec["coordinator"].startswith(w1 + ":"), rec
    events = executor.reconcile()
    assert [(e.kind, e.job) for e in events] == [("lost", "sfck")], events
    assert "the survivors elect" in events[0].detail
    assert _started(docker_client, w1) == before
    res = executor.rescale(spec, placement)  # the allocator's next round: a joiner
    assert res.mode == "stopfree", res
    assert len(res.joined) == 1, res
    seen = len(logs.steps())
    wait_for(lambda: logs.at(2, seen) >= 5, 180)
    steps = [m["step"] for m in logs.steps()]
    # the killed rank 0 may not have printed the agreed step; none else missing, and only
    # the steps since the agreed state repeated
    missing = set(range(steps[0], steps[-1] + 1)) - set(steps)
    assert missing <= {rec["step"]}, (missing, rec)
    assert len(steps) - len(set(steps)) <= rec["lost_steps"], (rec, steps)
    assert _started(docker_client, w1) == before


@pytest.mark.docker
@pytest.mark.slow
def test_a_migration_moves_every_worker_without_a_restart(
    executor: Executor, docker_client, example_image: str
) -> None:
    """Every GPU replaced (node1's two for node2's two): the joiners start first and join
    the running job (world 4), then the old containers, the coordinator's among them, leave
    (coordination moves to the first joiner); the step counter goes on."""
    spec = _spec("sfcm")
    executor.launch(spec, {"node1": ["0", "1"]})
    logs = Follow(docker_client, "sfcm")
    wait_for(lambda: logs.at(2) >= 5, 180)
    res = executor.rescale(spec, {"node2": ["0", "1"]})
    assert res.mode == "stopfree", res
    assert res.fallback is None, res
    assert res.joined == ("flowcon-sfcm--node2-w2", "flowcon-sfcm--node2-w3")
    assert set(res.left) == {"flowcon-sfcm--node1-w0", "flowcon-sfcm--node1-w1"}
    wait_for(lambda: logs.at(2, len(logs.steps()) - 1) >= 1 and logs.at(4) >= 1, 60)
    seen = len(logs.steps())
    wait_for(lambda: logs.at(2, seen) >= 10, 120)
    worlds = [m.get("world_size") for m in logs.steps()]
    assert 4 in worlds
    assert worlds[-1] == 2
    moved = [s for s in logs.events("scaled") if s.get("coordinator_moved")]
    assert len(moved) == 1, logs.events("scaled")
    assert moved[0]["coordinator"].startswith("flowcon-sfcm--node2-w2:")
    steps = [m["step"] for m in logs.steps()]
    assert steps == list(range(steps[0], steps[-1] + 1)), steps
    _exactly_once(logs.steps())
    state = executor.job("sfcm")
    assert state is not None
    assert sorted((w.node, w.name) for w in state.workers) == [
        ("node2", "flowcon-sfcm--node2-w2"),
        ("node2", "flowcon-sfcm--node2-w3"),
    ]
