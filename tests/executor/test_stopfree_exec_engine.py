"""Stop-free rescale on the real engine: the executor's side with a shell
job that keeps the contract (leaves with exit 144 on SIGUSR1), and the elastic-example job
on flowcon.elastic's stop-free runtime when that runtime is there."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from flowcon import contract
from flowcon.executor.backends.engine import network_name
from flowcon.executor.lifecycle import Executor
from flowcon.executor.stopfree_plan import json_objects

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import host_pids, step_job_spec, step_metrics  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)

# The executor's half of the contract, without torch: a worker that prints its role, and
# leaves (exit 144) on the leave signal; SIGTERM is the checkpoint-and-stop exit 143.
LEAVER = r"""
trap 'echo left; exit 144' USR1
trap 'exit 143' TERM
echo "role join=${FLOWCON_JOIN:-0} host=${FLOWCON_STORE_HOST:-0} target=${FLOWCON_TARGET_WORLD:-}"
while true; do sleep 0.1 & wait $!; done
"""


def _env(c) -> dict[str, str]:
    return dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])


@pytest.mark.docker
def test_stopfree_rescale_never_restarts_the_running_container(
    executor: Executor, docker_client
) -> None:
    spec = step_job_spec("sfx", command=["sh", "-c", LEAVER], scaling="stopfree")
    (host,) = executor.launch(spec, {"node1": ["0"]})
    c0 = docker_client.containers.get(host.id)
    started = c0.attrs["State"]["StartedAt"]
    e0 = _env(c0)
    assert e0[contract.ENV_STORE_HOST] == "1"
    assert e0[contract.ENV_SCALING] == "stopfree"
    assert network_name("sfx") in c0.attrs["NetworkSettings"]["Networks"]  # reachable

    res = executor.rescale(spec, {"node1": ["0", "1"]})
    assert res.mode == "stopfree"
    assert res.joined == ("flowcon-sfx--node1-w1",)
    c1 = docker_client.containers.get("flowcon-sfx--node1-w1")
    e1 = _env(c1)
    assert e1[contract.ENV_JOIN] == "1"
    assert e1[contract.ENV_TARGET_WORLD] == "2"
    assert e1["MASTER_ADDR"] == c0.name
    assert e1["MASTER_PORT"] == e0["MASTER_PORT"]
    assert network_name("sfx") in c1.attrs["NetworkSettings"]["Networks"]
    wait_for(lambda: "role join=1" in c1.logs().decode(), timeout=30)

    res = executor.rescale(spec, {"node1": ["0"]})
    assert res.mode == "stopfree"
    assert res.fallback is None
    assert res.left == ("flowcon-sfx--node1-w1",)
    names = [
        c.name
        for c in docker_client.containers.list(
            ignore_removed=True, all=True, filters={"label": "flowcon.job=sfx"}
        )
    ]
    assert names == [c0.name]  # the leaver is removed
    c0.reload()
    assert c0.id == host.id
    assert c0.status == "running"
    assert c0.attrs["State"]["StartedAt"] == started
    assert c0.attrs["RestartCount"] == 0
    state = executor.job("sfx")
    assert state is not None
    assert state.status == "running"
    assert state.scaling == "stopfree"


@pytest.mark.docker
def test_a_container_that_will_not_leave_is_checkpoint_restarted(
    executor: Executor, docker_client
) -> None:
    stubborn = LEAVER.replace("trap 'echo left; exit 144' USR1", "trap 'echo stay' USR1")
    spec = step_job_spec("sfy", command=["sh", "-c", stubborn], scaling="stopfree")
    executor.launch(spec, {"node1": ["0", "1"]})
    executor.options.leave_timeout_s = 2.0
    t0 = time.monotonic()
    res = executor.rescale(spec, {"node1": ["0"]})
    assert res.mode == "restart"
    assert "did not leave" in (res.fallback or "")
    assert time.monotonic() - t0 < 30
    state = executor.job("sfy")
    assert state is not None
    assert [w.gpus for w in state.workers] == [("FAKE-node1-0",)]


REPO = Path(__file__).resolve().parents[2]
# this checkout's example image under its own tag (other checkouts build :latest)
EXAMPLE = "flowcon/elastic-example:stopfree-exec-test"


@pytest.fixture(scope="module")
def example_image() -> str:
    """This checkout's example image, built once for the module under its own tag."""
    build = REPO / "images" / "elastic-example" / "build.sh"
    res = subprocess.run(["bash", str(build), EXAMPLE], capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr[-2000:]
    return EXAMPLE


@pytest.mark.docker
@pytest.mark.slow
def test_example_job_scales_1_2_1_without_restarting(
    executor: Executor, docker_client, example_image: str
) -> None:
    """The elastic-example image (label flowcon.elastic=stopfree, no ``scaling`` key) on
    flowcon.elastic's stop-free runtime: 1 -> 2 -> 1 containers; the first container's id
    and processes stay, the step counter goes on without a restart."""
    spec = step_job_spec(
        "sfex",
        image=EXAMPLE,
        command=["python3", "/opt/train.py"],
        global_batch_size=32,
        env={"STEP_SLEEP": "0.05"},
    )
    assert executor.scaling_of(spec) == "stopfree"  # from the image's label
    (host,) = executor.launch(spec, {"node1": ["0"]})
    c0 = docker_client.containers.get(host.id)
    wait_for(lambda: len(step_metrics(executor, "sfex")) >= 3, timeout=180)
    pids = host_pids(c0)
    started = c0.attrs["State"]["StartedAt"]

    def at(world: int) -> list[dict[str, Any]]:
        return [m for m in step_metrics(executor, "sfex") if m.get("world_size") == world]

    out = executor.rescale(spec, {"node1": ["0", "1"]})
    assert out.mode == "stopfree"
    assert out.joined == ("flowcon-sfex--node1-w1",)
    wait_for(lambda: len(at(2)) >= 3, timeout=240)
    back = executor.rescale(spec, {"node1": ["0"]})
    assert back.mode == "stopfree", back
    assert back.fallback is None, back
    seen = len(at(2))
    wait_for(lambda: [m for m in step_metrics(executor, "sfex")[-3:] if m.get("world_size") == 1]
             and len(at(2)) == seen, timeout=120)  # fmt: skip
    c0.reload()
    assert c0.id == host.id
    assert c0.status == "running"
    assert c0.attrs["RestartCount"] == 0
    assert c0.attrs["State"]["StartedAt"] == started
    assert pids <= host_pids(c0), (pids, host_pids(c0))  # the launcher and its worker: same pids
    steps = [m["step"] for m in step_metrics(executor, "sfex")]
    assert steps == sorted(steps), steps
    assert len(set(steps)) == len(steps), steps  # no restart
    worlds = [m.get("world_size") for m in step_metrics(executor, "sfex")]
    assert worlds[0] == 1
    assert 2 in worlds
    assert worlds[-1] == 1
    found = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": "flowcon.job=sfex"}
    )
    assert [c.name for c in found] == [c0.name]


def _events(ex: Executor, job: str, kind: str) -> list[dict[str, Any]]:
    """The job's ``"event"`` lines of ``kind`` from every container it has now."""
    return [
        obj
        for w in ex.backend.list_workers({"flowcon.job": job})
        for obj in json_objects(ex.backend.logs(w))
        if obj.get("event") == kind
    ]


@pytest.mark.docker
@pytest.mark.slow
def test_a_killed_worker_container_is_replaced_while_the_job_goes_on(
    executor: Executor, docker_client, example_image: str
) -> None:
    """The ``kill -9`` of one worker on the engine: one of three containers of the
    example job is killed (SIGKILL to its launcher and worker). The two others re-form from
    their in-memory state and go on training without a restart (same containers, rank 0's
    step counter repeats at most the steps since the last agreed state), ``reconcile``
    reports the lost container and removes it, and the next rescale to the job's placement
    starts a joiner in its place (stop-free)."""
    spec = step_job_spec(
        "sfk",
        image=example_image,
        command=["python3", "/opt/train.py"],
        global_batch_size=32,
        env={"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"},
    )
    placement = {"node1": ["0", "1", "2"]}
    executor.launch(spec, placement)
    wait_for(lambda: any(m.get("world_size") == 3 for m in step_metrics(executor, "sfk")), 180)
    names = sorted(
        c.name
        for c in docker_client.containers.list(
            ignore_removed=True, filters={"label": "flowcon.job=sfk"}
        )
    )
    assert len(names) == 3
    host, victim = names[0], names[2]
    kept = {n: docker_client.containers.get(n).attrs["State"]["StartedAt"] for n in names[:2]}
    seen = len(step_metrics(executor, "sfk"))
    docker_client.containers.get(victim).kill()  # SIGKILL

    def at_two() -> bool:
        return sum(m.get("world_size") == 2 for m in step_metrics(executor, "sfk")[seen:]) >= 10  # type: ignore[no-any-return]

    wait_for(at_two, 60)
    (rec,) = _events(executor, "sfk", "recovered")
    assert rec["world_size"] == 2, rec
    assert rec["failed"] == 1, rec
    assert rec["lost_steps"] <= 1, rec
    events = executor.reconcile()
    assert [(e.kind, e.job) for e in events] == [("lost", "sfk")], events
    assert victim in (events[0].detail or "")
    for n, started in kept.items():  # the survivors were never restarted
        c = docker_client.containers.get(n)
        assert c.status == "running", n
        assert c.attrs["State"]["StartedAt"] == started, n
    assert [w.name for w in executor.job("sfk").workers] == names[:2]  # type: ignore[union-attr]

    res = executor.rescale(spec, placement)  # the allocator's next round: same GPUs
    assert res.mode == "stopfree", res
    assert len(res.joined) == 1, res
    seen = len(step_metrics(executor, "sfk"))
    wait_for(
        lambda: sum(m.get("world_size") == 3 for m in step_metrics(executor, "sfk")[seen:]) >= 5,
        180,
    )
    steps = [m["step"] for m in step_metrics(executor, "sfk")]
    # no step skipped; repeated only those since the last agreed state
    assert set(steps) == set(range(steps[0], steps[-1] + 1)), steps
    assert len(steps) - len(set(steps)) <= rec["lost_steps"], (rec, steps)
    assert docker_client.containers.get(host).attrs["RestartCount"] == 0
