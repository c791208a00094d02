"""The stop-free job's coordinator on the real engine (the elastic-example image on
flowcon.elastic's runtime, real torch): the container hosting it leaves in a scale-in, is
killed, or the whole job migrates to other GPUs, and the job goes on without a restart.
Every container's output is followed while it lives (the executor removes a container
that left), so the step lines of all ranks 0 are checked together: the step counter goes
on, each sample is used once per epoch."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from flowcon.executor.lifecycle import Executor
from flowcon.executor.stopfree_plan import json_objects

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
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


class Follow:
    """The output of every container of a job, followed from its start to its exit."""

    def __init__(self, client: Any, job: str) -> None:
        self.client, self.job = client, job
        self.lines: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def poll(self) -> None:
        """Follow the job's containers not followed yet."""
        found = self.client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"flowcon.job={self.job}"}
        )
        for c in found:
            if c.name in self.lines:
                continue
            self.lines[c.name] = []
            t = threading.Thread(target=self._follow, args=(c,), daemon=True)
            t.start()
            self._threads.append(t)

    def _follow(self, c: Any) -> None:
        buf = b""
        try:
            for chunk in c.logs(stream=True, follow=True, stdout=True, stderr=False):
                buf += chunk
                *done, buf = buf.split(b"\n")
                with self._lock:
                    self.lines[c.name].extend(d.decode(errors="replace") for d in done)
        except Exception:  # the container went: what was read stays
            return

    def objects(self, name: str | None = None) -> list[dict[str, Any]]:
        self.poll()
        with self._lock:
            names = [name] if name else sorted(self.lines)
            text = [ln for n in names for ln in self.lines.get(n, [])]
        return list(json_objects(text))

    def steps(self) -> list[dict[str, Any]]:
        """Every rank 0's step lines, in time order."""
        lines = [o for o in self.objects() if "event" not in o and "step" in o]
        return sorted(lines, key=lambda o: float(o.get("ts", 0)))

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects() if o.get("event") == kind]

    def at(self, world: int, after: int = 0) -> int:
        return sum(1 for m in self.steps()[after:] if m.get("world_size") == world)


def _spec(name: str) -> Any:
    return step_job_spec(
        name,
        image=IMAGE,
        command=["python3", "/opt/train.py"],
        global_batch_size=GBS,
        env={"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"},
    )


def _exactly_once(lines: list[dict[str, Any]]) -> None:
    """Each step's global batch whole, each sample at most once per epoch."""
    by_epoch: dict[int, list[int]] = {}
    for m in lines:
        assert len(m["sample_ids"]) == GBS, m["step"]
        by_epoch.setdefault(m["epoch"], []).extend(m["sample_ids"])
    for epoch, ids in by_epoch.items():
        assert len(set(ids)) == len(ids), epoch
        assert set(ids) <= set(range(SAMPLES)), epoch


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
    names = [c.name for c in docker_client.containers.list(filters={"label": "flowcon.job=sfcl"})]
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
