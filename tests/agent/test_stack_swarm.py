"""agent/stack.yml deployed with ``docker stack deploy`` on the two-node swarm of
scripts/swarm-up.sh: the agent runs as a global service on both nodes and turns healthy,
manages labelled containers on each node (their CPU limits change with docker update),
the allocator answers /healthz, and ``docker stack rm`` plus the volumes' removal leave
nothing behind.

The one-machine swarm shares one filesystem and one network namespace between its nodes,
so the test sets two of the stack's variables: FLOWCON_DOCKER_SOCK to a per-node path
(``{{.Node.ID}}`` is expanded by Swarm; a symlink per node points at that node's engine
socket) and FLOWCON_AGENT_NETWORK to a swarm-scoped bridge network with one local bridge
per node (two agents on the one host network would both want port 9464; overlay networks
need iptables, which node 2 runs without). Everything else is the file as an operator
deploys it.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.session import REPO, TEST_LABEL, TESTBOX_IMAGE

from flowcon.testing.ports import free_port

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.swarm_fixtures import NODE2_SOCK  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

IMAGE = "flowcon/agent:stack-test"
SOCK_DIR = Path("/run/flowcon-stack-test")

# a training job for busybox: a falling "loss", one line per 0.2 s
JOB = r"""
i=0; l=100000
while true; do
  i=$((i+1)); l=$((l - 50))
  printf '{"step":%d,"loss":%d,"threads":1}\n' "$i" "$l"
  sleep 0.2
done
"""


def _sh(*cmd: str, env: dict[str, str] | None = None, timeout: float = 300) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(cmd)}: {out.stderr[-1500:]}"
    return out.stdout


@pytest.fixture(scope="module")
def agent_image(swarm: Any) -> str:
    """agent/build.sh on the main engine, copied into node 2 (it cannot pull)."""
    _sh("bash", str(REPO / "agent" / "build.sh"), IMAGE, timeout=600)
    save = subprocess.Popen(["docker", "save", IMAGE], stdout=subprocess.PIPE)
    load = subprocess.run(
        ["docker", "-H", NODE2_SOCK, "load", "-q"], stdin=save.stdout, capture_output=True
    )
    assert save.wait(timeout=600) == 0, load.stderr[-800:]
    assert load.returncode == 0, load.stderr[-800:]
    return IMAGE


def _leftovers(swarm: Any, stack: str) -> list[str]:
    flt = {"label": f"com.docker.stack.namespace={stack}"}
    left = [f"service {s.name}" for s in swarm.manager.services.list(filters=flt)]
    left += [f"network {n.name}" for n in swarm.manager.networks.list(filters=flt)]
    left += [f"config {c.name}" for c in swarm.manager.configs.list(filters=flt)]
    left += [f"secret {s.name}" for s in swarm.manager.secrets.list(filters=flt)]
    for node, client in (("node1", swarm.manager), ("node2", swarm.node2)):
        left += [f"{node} volume {v.name}" for v in client.volumes.list(filters=flt)]
        left += [
            f"{node} container {c.name}"
            for c in client.containers.list(ignore_removed=True, all=True, filters=flt)
        ]
    return left


def _remove_stack(swarm: Any, stack: str) -> None:
    """What an operator does: docker stack rm, then the named volumes on every node once
    the tasks' containers are gone."""
    subprocess.run(["docker", "stack", "rm", stack], capture_output=True, timeout=120)
    flt = {"label": f"com.docker.stack.namespace={stack}"}
    end = time.monotonic() + 90
    clients = (swarm.manager, swarm.node2)
    while time.monotonic() < end and any(
        c.containers.list(ignore_removed=True, all=True, filters=flt) for c in clients
    ):
        time.sleep(1)
    for client in clients:
        for v in client.volumes.list(filters=flt):
            try:
                v.remove(force=True)
            except Exception:
                time.sleep(2)
                v.remove(force=True)


AGENT_GATEWAY = "172.30.201.1"  # node 1's bridge of the agents' network (below)


def _measurements_received(port: int) -> float:
    """Agent measurements the allocator took in (any outcome: a refused token never
    gets that far, it is a 401 before the body is read)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(
        float(ln.split()[-1])
        for ln in text.splitlines()
        if ln.startswith("flowcon_allocator_measurements_total{")
    )


def _agent_network(name: str) -> list[list[str]]:
    """A swarm-scoped bridge network: a config-only network per node (own subnet, own
    bridge name) and the swarm network built from them (docker CLI: the SDK has no
    --config-only). Returns the commands that remove them, in order."""
    undo: list[list[str]] = []
    for i, host in enumerate(("unix:///var/run/docker.sock", NODE2_SOCK), start=1):
        _sh(
            "docker", "-H", host, "network", "create", "--config-only",
            "--subnet", f"172.30.{200 + i}.0/24",
            "-o", f"com.docker.network.bridge.name={name[:8]}n{i}", f"{name}-cfg",
        )  # fmt: skip
        undo.append(["docker", "-H", host, "network", "rm", f"{name}-cfg"])
    _sh("docker", "network", "create", "-d", "bridge", "--scope", "swarm",
        "--config-from", f"{name}-cfg", name)  # fmt: skip
    return [["docker", "network", "rm", name], *undo]


def _stack_env(tmp: Path, swarm: Any, port: int, run_id: str) -> dict[str, str]:
    agent_cfg = yaml.safe_load((REPO / "agent" / "flowcon.yaml").read_text())
    # only this test's containers: other agents' tests share these engines
    agent_cfg.update(itval=2, itval_max=8, match_labels={TEST_LABEL: run_id})
    (tmp / "flowcon.yaml").write_text(yaml.safe_dump(agent_cfg))
    alloc_cfg = yaml.safe_load((REPO / "agent" / "allocator.yaml").read_text())
    # on all addresses: the agents reach it from their bridge network through its gateway
    alloc_cfg["allocator"]["listen"] = f"0.0.0.0:{port}"
    alloc_cfg["allocator"]["slot_seconds"] = 5
    (tmp / "allocator.yaml").write_text(yaml.safe_dump(alloc_cfg))
    (tmp / "secrets").mkdir()
    for role in ("agent", "user", "read"):
        (tmp / "secrets" / role).write_text(secrets.token_urlsafe(24) + "\n")
    # one socket path per swarm node id, each a link to that node's engine socket
    SOCK_DIR.mkdir(exist_ok=True)
    for label, sock in (("node1", "/var/run/docker.sock"), ("node2", NODE2_SOCK[7:])):
        link = SOCK_DIR / f"{swarm.nodes[label]}.sock"
        link.unlink(missing_ok=True)
        link.symlink_to(sock)
    return {
        **os.environ,
        "FLOWCON_IMAGE": IMAGE,
        "FLOWCON_AGENT_CONFIG": str(tmp / "flowcon.yaml"),
        "FLOWCON_ALLOCATOR_CONFIG": str(tmp / "allocator.yaml"),
        "FLOWCON_SECRETS_DIR": str(tmp / "secrets"),
        "FLOWCON_DOCKER_SOCK": f"{SOCK_DIR}/{{{{.Node.ID}}}}.sock",
        "FLOWCON_AGENT_NETWORK": f"fcnet{run_id[-6:]}",
        "FLOWCON_HEALTH_INTERVAL": "3s",
        # the host, seen from node 1's agent network (both nodes are this machine)
        "FLOWCON_ALLOCATOR_URL": f"http://{AGENT_GATEWAY}:{port}",
    }


def _agent_container(client: Any, stack: str) -> Any:
    flt = {"label": f"com.docker.swarm.service.name={stack}_agent"}
    running = client.containers.list(ignore_removed=True, filters=flt)
    return running[0] if running else None


def _series(c: Any, name: str) -> bool:
    """The agent's /metrics (fetched inside its container) has a limit series of ``name``
    with the cAdvisor-style full id."""
    code = (
        "import urllib.request as u;"
        "print(u.urlopen('http://127.0.0.1:9464/metrics').read().decode())"
    )
    text = c.exec_run(["python3", "-c", code]).output.decode()
    return any(
        ln.startswith("flowcon_container_cpu_limit_cpus{")
        and f'name="{name}"' in ln
        and re.search(r'id="/docker/[0-9a-f]{64}"', ln) is not None
        for ln in text.splitlines()
    )


def _health(c: Any) -> str:
    c.reload()
    return str(c.attrs["State"].get("Health", {}).get("Status"))


def test_stack_deploys_manages_both_nodes_and_is_removed_cleanly(
    swarm: Any, agent_image: str, labeled: Any, test_run_id: str, tmp_path: Path
) -> None:
    stack = f"fcst{test_run_id[-6:]}".replace("-", "")
    port = free_port()
    env = _stack_env(tmp_path, swarm, port, test_run_id)
    jobs: list[Any] = []
    networks: list[list[str]] = []
    try:
        networks = _agent_network(env["FLOWCON_AGENT_NETWORK"])
        _sh("docker", "stack", "deploy", "-c", str(REPO / "agent" / "stack.yml"), stack, env=env)
        svc = swarm.manager.services.get(f"{stack}_agent")
        assert "Global" in svc.attrs["Spec"]["Mode"]
        res = svc.attrs["Spec"]["TaskTemplate"]["Resources"]
        assert res["Limits"]["NanoCPUs"] == 250_000_000
        assert res["Reservations"]["MemoryBytes"]
        # the agent on both nodes, each healthy by its own HEALTHCHECK (/healthz)
        agents = {
            label: wait_for(lambda c=client: _agent_container(c, stack), timeout=120)  # type: ignore[misc]
            for label, client in (("node1", swarm.manager), ("node2", swarm.node2))
        }
        for label, c in agents.items():
            wait_for(lambda c=c: _health(c) == "healthy", timeout=90)  # type: ignore[misc]
            probe = c.exec_run(["python3", "-m", "flowcon.web.probe"])
            assert probe.exit_code == 0, (label, probe)
            assert b'"status": "ok"' in probe.output, (label, probe)
        # two labelled training containers per node: the node's agent limits both
        for label, client in (("node1", swarm.manager), ("node2", swarm.node2)):
            for i in range(2):
                jobs.append(
                    client.containers.run(
                        TESTBOX_IMAGE,
                        ["sh", "-c", JOB],
                        name=f"{stack}-{label}-{i}",
                        labels=labeled(**{"flowcon.enable": "true", "flowcon.metric": "loss"}),
                        detach=True,
                    )
                )

        def limited(c: Any) -> bool:
            c.reload()
            return bool(c.attrs["HostConfig"]["NanoCpus"])

        for c in jobs:
            wait_for(lambda c=c: limited(c), timeout=60)  # type: ignore[misc]
        for label, c in agents.items():
            out = c.exec_run(["python3", "-m", "flowcon.cli", "status", "--json", "--no-engine"])
            assert out.exit_code == 0, out.output
            names = {x["name"] for x in json.loads(out.output)["containers"]}
            assert names == {f"{stack}-{label}-0", f"{stack}-{label}-1"}, (label, names)
            # the series appear after the agent's next periodic round (itval 2 s)
            wait_for(lambda c=c, label=label: _series(c, f"{stack}-{label}-0"), timeout=60)  # type: ignore[misc]
        # the allocator: one task on the manager, /healthz answers on the host network
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10) as r:
            body = json.loads(r.read())
        assert r.status == 200
        assert body["status"] == "ok"
        assert body["executor"] == "swarm"
        # the agents report what they measure to the allocator with the agent secret
        wait_for(lambda: _measurements_received(port) >= 2, timeout=60)
    finally:
        for c in jobs:
            with contextlib.suppress(Exception):
                c.remove(force=True)
        _remove_stack(swarm, stack)
        for cmd in networks:
            subprocess.run(cmd, capture_output=True, timeout=60)
        for link in SOCK_DIR.glob("*.sock"):
            link.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            SOCK_DIR.rmdir()
    assert _leftovers(swarm, stack) == []
    for host in ("unix:///var/run/docker.sock", NODE2_SOCK):
        nets = _sh(
            "docker", "-H", host, "network", "ls", "-q", "-f", f"name=fcnet{test_run_id[-6:]}"
        )
        assert nets.strip() == "", host
