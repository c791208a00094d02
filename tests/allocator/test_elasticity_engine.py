"""Operator requests on running jobs, on the real engine under the allocator daemon:
``scale``, ``migrate``, ``drain`` and ``undrain`` move a stop-free job (the elastic-example
image, real torch) without a restart (its step counter goes on, the rendezvous generation
moves on, each sample once per epoch), and a checkpoint-restart job by checkpoint-restart."""

from __future__ import annotations

import time
from typing import Any

import pytest
from click.testing import CliRunner
from support.allocator_daemon import daemon_env, engine_config, wait_for
from support.follow import Follow, exactly_once

from flowcon.cli import main
from flowcon.client.http import AllocatorClient
from flowcon.testing.stepjob import STEP_JOB

pytestmark = [pytest.mark.docker, pytest.mark.slow]

EXAMPLE = "flowcon/elastic-example:latest"
GBS = 32
SAMPLES = 4096  # train.py's data set
CONFIG = engine_config(profile_seconds=30)
NODES = ("node1", "node2")


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, CONFIG, image=EXAMPLE)


def _stopfree(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "image": EXAMPLE,
        "command": ["python3", "/opt/train.py"],
        "global_batch_size": GBS,
        "iterations": 10**7,
        "best_effort": True,
        "max_gpus": 2,
        "profile": {1: 10.0, 2: 18.0},
        "env": {"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"},
        "launcher": "flowcon",
        "scaling": "stopfree",
    }


def _nodes_of(client: AllocatorClient, name: str) -> set[str]:
    return {NODES[int(n)] for n, _ in client.job(name)["placement"]}


def _containers(docker_client: Any, name: str) -> dict[str, tuple[str, int]]:
    found = docker_client.containers.list(
        ignore_removed=True, filters={"label": f"flowcon.job={name}"}
    )
    return {c.name: (c.attrs["State"]["StartedAt"], c.attrs["RestartCount"]) for c in found}


def test_scale_migrate_drain_keep_a_stopfree_job_training(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"sfop{rid}"
    client.submit(_stopfree(name))
    logs = Follow(docker_client, name)
    wait_for(lambda: client.job(name)["gpus"] == 2, 60)
    wait_for(lambda: logs.at(2) >= 5, 240)

    # scale in: held at 1 GPU, the stayer is never restarted
    before = _containers(docker_client, name)
    client.scale(name, 1)
    wait_for(lambda: logs.at(1) >= 5, 180)
    after = _containers(docker_client, name)
    assert len(after) == 1
    ((stayer, started),) = after.items()
    assert before[stayer] == started  # same start, no restart
    assert client.job(name)["gpus"] == 1

    # migrate: the job's one container (its coordinator's) moves to the other node
    src = _nodes_of(client, name)
    dst = next(n for n in NODES if n not in src)
    seen = len(logs.steps())
    client.migrate(name, dst)
    wait_for(lambda: _nodes_of(client, name) == {dst}, 60)
    wait_for(
        lambda: logs.at(1, after=seen) >= 5 and stayer not in _containers(docker_client, name), 180
    )

    # drain that node: the CLI waits until it is empty; the job trains on the first
    runner = CliRunner()
    args = ["--url", alloc.url, "--token", alloc.token]
    out = runner.invoke(main, ["drain", dst, "--timeout", "180", "--interval", "0.5", *args])
    assert out.exit_code == 0, out.output
    assert f"node/{dst} drained" in out.output
    assert _nodes_of(client, name) == src
    seen = len(logs.steps())
    wait_for(lambda: logs.at(1, after=seen) >= 5, 180)
    nodes = {n["name"]: n for n in client.nodes()}
    assert nodes[dst]["status"] == "Drained"
    assert nodes[dst]["jobs"] == []
    out = runner.invoke(main, ["undrain", dst, *args])
    assert out.exit_code == 0, out.output
    assert {n["name"]: n for n in client.nodes()}[dst]["status"] == "Ready"

    # never restarted: one step counter across every container, each sample once an epoch
    steps = logs.steps()
    numbers = [m["step"] for m in steps]
    assert numbers == sorted(numbers), numbers
    assert len(set(numbers)) == len(numbers), numbers
    exactly_once(steps, GBS, SAMPLES)
    generations = [int(e["gen"]) for e in logs.events("scaled")]
    assert len(generations) >= 3, logs.events("scaled")  # scale-in, migration, drain
    assert generations == sorted(generations), generations
    kinds = [e["kind"] for e in client.job(name)["events"]]
    for kind in ("scale_requested", "rescaled_stop_free", "migrate_requested", "migrated"):
        assert kind in kinds, kinds
    assert "restarted_on_new_gpus" not in kinds, kinds
    assert "draining" in kinds


def test_drain_moves_a_restart_job_by_checkpoint_restart(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"rsop{rid}"
    client.submit(
        {
            "name": name,
            "image": "flowcon/testbox:latest",
            "command": ["sh", "-c", STEP_JOB],
            "global_batch_size": 64,
            "iterations": 10**6,
            "best_effort": True,
            "max_gpus": 1,
            "profile": {1: 5.0},
            "env": {"STEP_SECONDS": "0.1"},
            "launcher": "flowcon",
            "scaling": "restart",
        }
    )
    wait_for(lambda: client.job(name)["gpus"] == 1 and _containers(docker_client, name), 60)
    (node,) = _nodes_of(client, name)
    wait_for(lambda: client.job(name)["done_iterations"] > 0, 60)
    client.drain(node)
    other = next(n for n in NODES if n != node)
    wait_for(lambda: _nodes_of(client, name) == {other}, 60)
    wait_for(
        lambda: "restarted_on_new_gpus" in [e["kind"] for e in client.job(name)["events"]], 120
    )
    (moved,) = [e for e in client.job(name)["events"] if e["kind"] == "restarted_on_new_gpus"]
    assert moved["mode"] == "restart"
    assert moved["old_gpus"] == moved["new_gpus"] == 1
    wait_for(lambda: client.node(node)["jobs"] == [], 30)
    t0 = time.monotonic()
    wait_for(
        lambda: client.job(name)["state"] == "running" and _containers(docker_client, name), 60
    )
    assert time.monotonic() - t0 < 60
