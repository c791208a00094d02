"""Fixtures for executor and swarm tests; import them in a test module::

    pytest_plugins = ("support.swarm_fixtures",)   # the fixtures
    from support.swarm_fixtures import step_job_spec, swarm_executor_for

``swarm`` (session scope) brings up the two-node swarm with scripts/swarm-up.sh and takes
it down at the end if it brought it up; it skips with the reason when that is impossible
(not root, no dockerd, the engine refuses swarm mode).

``step_job_spec`` runs ``STEP_JOB`` (flowcon.testing.stepjob, which benchmarks use too), a
busybox shell training job for flowcon/testbox that makes checkpoint-restart observable
without torch.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from flowcon.testing.stepjob import STEP_JOB
from support.session import REPO, SESSION_ID, SESSION_LABEL, TEST_LABEL, TESTBOX_IMAGE

ELASTIC_IMAGE = "flowcon/elastic-example:latest"
DDP_IMAGE = "flowcon/ddp-example:latest"  # the launcher tests' plain DDP script

NODE2_SOCK = os.environ.get("FLOWCON_NODE2_SOCK", "unix:///run/flowcon-node2.sock")


def swarm_executor_for(
    swarm: Any, labels: dict[str, str], ckpt: str, grace_s: float, gpus_per_node: int = 2
) -> Any:
    """A real executor on the two-node swarm with a declared inventory (``gpus_per_node``
    GPUs on node1 and node2), this test's labels and checkpoint folder."""
    from flowcon.engine.gpus import discover
    from flowcon.executor.backends.swarm import SwarmBackend
    from flowcon.executor.lifecycle import Executor, ExecutorOptions

    nodes = [{"name": n, "gpus": gpus_per_node} for n in ("node1", "node2")]
    inv = discover({"declared": {"nodes": nodes}})
    # both engines here are below API 1.46 (no no-new-privileges for services)
    backend = SwarmBackend(
        swarm.manager, node_clients={"node2": swarm.node2}, allow_weak_hardening=True
    )
    opts = ExecutorOptions(grace_s=grace_s, extra_labels=labels, checkpoint_host_dir=ckpt)
    return Executor(backend, inv, opts)


def step_job_spec(name: str, iterations: int = 10000, **overrides: Any) -> Any:
    """A JobSpec running STEP_JOB on the testbox image."""
    from flowcon.jobspec.spec import parse_jobspec

    raw: dict[str, Any] = {
        "name": name,
        "image": TESTBOX_IMAGE,
        "command": ["sh", "-c", STEP_JOB],
        "global_batch_size": 64,
        "iterations": iterations,
        "best_effort": True,
        "profile": {1: 5.0},
        "launcher": "flowcon",  # one container per node (the executor tests count them)
    }
    raw.update(overrides)
    return parse_jobspec(raw)


def step_metrics(ex: Any, job: str) -> list[dict[str, Any]]:
    """The step lines of the job's rank-0 container (``flowcon.report`` JSON with a
    ``step`` and no ``event``: step, world_size, the script's values)."""
    from flowcon.executor.stopfree_plan import json_objects

    return [o for o in json_objects(ex.logs(job)) if "event" not in o and "step" in o]


def host_pids(container: Any) -> set[str]:
    """The host pids of a container's processes (a launcher and its worker)."""
    return {str(p[1]) for p in container.top()["Processes"]}


def sweep(client: Any, label: str) -> None:
    """Remove services, containers, networks and volumes carrying ``label`` (k=v)."""
    flt = {"label": label}
    for kind in ("services", "containers", "networks", "volumes"):
        coll = getattr(client, kind)
        try:
            items = (
                coll.list(all=True, filters=flt) if kind == "containers" else coll.list(filters=flt)
            )
        except Exception:
            continue
        for item in items:
            try:
                if kind in ("containers", "volumes"):
                    item.remove(force=True)
                else:
                    item.remove()
            except Exception:
                pass


@pytest.fixture
def executor(docker_client, labeled, test_run_id):
    """An engine-backend Executor with a declared 2x4 inventory; everything it made is removed."""
    from flowcon.engine.gpus import discover
    from flowcon.executor.backends.engine import EngineBackend
    from flowcon.executor.lifecycle import Executor, ExecutorOptions

    inv = discover(
        {"declared": {"nodes": [{"name": "node1", "gpus": 4}, {"name": "node2", "gpus": 4}]}},
        nvml=_NoNvml(),
    )
    opts = ExecutorOptions(grace_s=10.0, max_restarts=2, extra_labels=labeled())
    ex = Executor(EngineBackend(docker_client), inv, opts)
    yield ex
    sweep(docker_client, f"{TEST_LABEL}={test_run_id}")


class _NoNvml:
    """A pynvml stand-in whose init fails like on a machine without a driver."""

    def nvmlInit(self) -> None:
        raise RuntimeError("NVML Shared Library Not Found")


@dataclass
class Swarm:
    manager: Any  # docker client of the main engine (swarm manager, node1)
    node2: Any  # docker client of the second engine (worker, node2)
    nodes: dict[str, str]  # flowcon.node label -> swarm node id


@pytest.fixture(scope="session")
def swarm() -> Iterator[Swarm]:
    import docker

    if os.geteuid() != 0:
        pytest.skip("the 2-node swarm needs root (a second dockerd)")
    up = subprocess.run(
        # elastic-example too (scripts/test.sh builds it), so the cross-node DDP test runs
        # rather than skips; swarm-up.sh passes over an image the main engine lacks.
        ["bash", str(REPO / "scripts" / "swarm-up.sh"), TESTBOX_IMAGE, ELASTIC_IMAGE, DDP_IMAGE],
        capture_output=True,
        text=True,
        timeout=480,  # a first copy of elastic-example into node 2 moves ~1 GB
    )
    if up.returncode != 0:
        # A half-failed swarm-up (node 2's dockerd started, the join failed, ...) is torn
        # down: swarm-down.sh undoes only what swarm-up recorded in its state file.
        _swarm_down()
        pytest.skip(f"scripts/swarm-up.sh failed: {(up.stderr or up.stdout).strip()[-600:]}")
    brought_up = "already up" not in up.stderr
    manager = docker.from_env(timeout=60)
    node2 = docker.DockerClient(base_url=NODE2_SOCK, timeout=60)
    nodes = {}
    for n in manager.nodes.list():
        label = (n.attrs.get("Spec", {}).get("Labels") or {}).get("flowcon.node")
        if label:
            nodes[label] = n.id
    try:
        yield Swarm(manager, node2, nodes)  # type: ignore[arg-type]
    finally:
        sweep(manager, f"{SESSION_LABEL}={SESSION_ID}")
        sweep(node2, f"{SESSION_LABEL}={SESSION_ID}")
        if brought_up and not os.environ.get("FLOWCON_KEEP_SWARM"):
            _swarm_down()


def _swarm_down() -> None:
    subprocess.run(
        ["bash", str(REPO / "scripts" / "swarm-down.sh")], capture_output=True, timeout=120
    )
