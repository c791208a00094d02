"""Every job on its own bridge network (engine backend, ``executor.network: auto``): a
container of one user's job cannot reach another user's job, while the containers of one
job reach each other; the network carries the job's labels and goes with the job."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest
from support.swarm_fixtures import step_job_spec
from support.waiting import wait_for

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = pytest.mark.docker

SERVE = "cd /flowcon/checkpoint && echo reached > i && exec httpd -f -p 8000 -h /flowcon/checkpoint"


def _spec(name: str, owner: str):
    from dataclasses import replace

    spec = step_job_spec(name, command=["sh", "-c", SERVE], launcher="none")
    return replace(spec, owner=owner)


def _ip(container) -> str:
    container.reload()
    nets = container.attrs["NetworkSettings"]["Networks"]
    assert len(nets) == 1, nets  # its job's network only, not the default bridge
    return str(next(iter(nets.values()))["IPAddress"])


def _fetch(container, addr: str) -> str:
    """What ``container`` gets from ``addr``'s server ("reached" when it reaches it)."""
    fetch = f"printf 'GET /i HTTP/1.0\\r\\n\\r\\n' | timeout 5 nc {addr} 8000"
    code, out = container.exec_run(["sh", "-c", fetch])
    text = out.decode(errors="replace")
    return "reached" if code == 0 and text.endswith("reached\n") else f"failed ({code}): {text!r}"


def _answers(container: Any) -> bool:
    return _fetch(container, "127.0.0.1") == "reached"


def test_jobs_of_two_users_cannot_reach_each_other(executor, docker_client) -> None:
    from flowcon.executor.backends.engine import network_name

    executor.launch(_spec("net-alice", "alice"), {"node1": ["0"]})
    executor.launch(_spec("net-bob", "bob"), {"node1": ["1"]})
    executor.launch(_spec("net-pair", "alice"), {"node1": ["2"], "node2": ["0"]})

    def running(job: str) -> list[Any]:
        return [
            docker_client.containers.get(w.id)
            for w in executor.backend.list_workers({"flowcon.job": job})
            if w.state == "running"
        ]

    wait_for(
        lambda: (
            len(running("net-alice")) == 1
            and len(running("net-bob")) == 1
            and len(running("net-pair")) == 2
        ),
        60,
    )
    (alice,), (bob,) = running("net-alice"), running("net-bob")
    pair = running("net-pair")
    for job in ("net-alice", "net-bob", "net-pair"):
        net = docker_client.networks.get(network_name(job))
        assert net.attrs["Labels"]["flowcon.job"] == job
    # every server is up: each answers itself
    for c in (alice, bob, *pair):
        wait_for(partial(_answers, c), 30)
    assert _fetch(pair[0], _ip(pair[1])) == "reached"  # one job's containers talk
    assert _fetch(pair[1], pair[0].name) == "reached"  # by name too
    for a, b in ((alice, bob), (bob, alice), (alice, pair[0]), (pair[1], bob)):
        assert _fetch(a, _ip(b)) != "reached", (a.name, b.name)
    executor.remove("net-bob")
    wait_for(lambda: not docker_client.networks.list(names=[network_name("net-bob")]), 30)
