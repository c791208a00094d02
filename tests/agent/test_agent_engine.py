"""The agent on a real Docker engine: limits move as Algorithm 1 says, opt-in only,
limits restored at SIGTERM, start events handled in under a second, and an engine
restart survived (on a private dockerd, never the shared one)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from support.waiting import wait_for as poll

from flowcon.testing.private_engine import (
    PRIVATE_HOST,
    EngineUnavailable,
    PrivateEngine,
    setup_private,
    teardown_private,
)

REPO = Path(__file__).resolve().parents[2]
TESTBOX_IMAGE = "flowcon/testbox:latest"

pytestmark = pytest.mark.docker

NANO = 10**9


def job(loss_expr: str, busy: int = 300, nap: str = "0.05") -> list[str]:
    """A testbox training loop: burns some CPU, prints one metric line per step."""
    return [
        "sh",
        "-c",
        "i=0; while true; do i=$((i+1)); j=0; "
        f"while [ $j -lt {busy} ]; do j=$((j+1)); done; "
        f'printf \'{{"step":%d,"loss":%d}}\\n\' $i $(({loss_expr})); sleep {nap}; done',
    ]


def wait_for(cond: Callable[[], Any], timeout: float, what: str, step: float = 0.1) -> Any:
    return poll(cond, timeout, step, what)


def host_cfg(container: Any) -> dict[str, Any]:
    container.reload()
    return container.attrs["HostConfig"]  # type: ignore[no-any-return]


def started_at(container: Any) -> float:
    raw = container.attrs["State"]["StartedAt"]  # 2026-11-21T19:18:06.591384983Z
    main, frac = raw.rstrip("Z").split(".")
    return datetime.fromisoformat(main + "+00:00").timestamp() + float("0." + frac)


class AgentProc:
    def __init__(self, tmp: Path, **cfg: Any) -> None:
        self.state = tmp / "state.json"
        self.log = tmp / "agent.log"
        conf = {"state_file": str(self.state), **cfg}
        self.cfg_path = tmp / "agent.yaml"
        self.cfg_path.write_text(yaml.safe_dump(conf))
        env = {**os.environ, "PYTHONPATH": str(REPO), "FLOWCON_LOG_LEVEL": "INFO"}
        env.pop("DOCKER_HOST", None)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "flowcon.cli", "agent", "--config", str(self.cfg_path)],
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
            env=env,
            cwd=str(REPO),
        )

    def record(self, cid: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self.state.read_text())
        except (OSError, ValueError):
            return None
        return data["containers"].get(cid)  # type: ignore[no-any-return]

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        return self.proc.returncode

    def text(self) -> str:
        return self.log.read_text() if self.log.exists() else ""


@pytest.fixture
def tmp_agent(tmp_path: Path) -> Iterator[list[AgentProc]]:
    agents: list[AgentProc] = []
    yield agents
    for a in agents:
        a.stop()


def test_agent_on_the_engine(docker_client, labeled, cleanup_containers, tmp_agent, tmp_path):
    host_cpus = docker_client.info()["NCPU"]
    run_id = labeled()["flowcon.test"]

    def start(name: str, loss: str, **kw: Any) -> Any:
        extra = kw.pop("labels", {})
        return docker_client.containers.run(
            TESTBOX_IMAGE,
            job(loss),
            detach=True,
            name=f"fc-{run_id}-{name}",
            labels=labeled(**extra),
            network_mode="none",
            **kw,
        )

    on = {"flowcon.enable": "true"}
    fast = start("fast", "100000/(i*5000+10)", labels=on)  # flat (0) after 20 steps
    medium = start("medium", "100000/(i+10)", labels=on, nano_cpus=3 * NANO // 2)
    steady = start("steady", "1000000-i*10", labels=on)  # constant progress
    plain = start("plain", "100000-i", labels={"flowcon.metric": "loss"})  # not opted in
    agent = AgentProc(
        tmp_path,
        control="quota",  # the CFS-quota path; the modes: test_executor_control_engine.py
        itval=1,
        itval_max=4,
        alpha=0.05,
        beta=2,
        reference_intervals=2,
        min_update_cpus=0,  # every change applied: the exact Algorithm 1 values
        match_labels={"flowcon.test": run_id},  # leave other engineers' containers alone
    )
    tmp_agent.append(agent)

    # The converged container ends in CL at the floor 1/(beta*|c|) of the host ...
    def fast_in_cl() -> bool:
        rec = agent.record(fast.id)
        return bool(rec and rec["list"] == "CL")

    wait_for(fast_in_cl, 60, f"fast in CL\n{agent.text()[-3000:]}")
    floor_cpus = round(1 / (2 * 3) * host_cpus, 3)
    wait_for(
        lambda: host_cfg(fast)["NanoCpus"] == int(round(floor_cpus * NANO)),
        10,
        "fast at the CL floor",
    )
    # ... while the steady one stays in NL with G/sumG, more than the floor.
    rec = agent.record(steady.id)
    assert rec is not None
    assert rec["list"] == "NL"
    assert rec["limit"] > 1 / 6
    steady_nano = host_cfg(steady)["NanoCpus"]
    assert steady_nano > int(floor_cpus * NANO)
    assert steady_nano == int(round(rec["applied_cpus"] * NANO))

    # A new labeled container is limited within a second of its start event.
    new = start("new", "1000000-i*10", labels={**on, "flowcon.cpus.max": "1.5"})
    limited = wait_for(lambda: host_cfg(new)["NanoCpus"] and time.time(), 5, "new limited", 0.02)
    latency = limited - started_at(new)
    assert 0 < host_cfg(new)["NanoCpus"] <= 1.5 * NANO
    assert latency < 1.0, f"start -> limit took {latency:.2f}s"

    # The unlabeled container was never touched.
    hc = host_cfg(plain)
    assert (hc["NanoCpus"], hc["CpuQuota"], hc["CpuPeriod"]) == (0, 0, 0)
    assert plain.id[:12] not in agent.text()

    # `flowcon status` shows the engine's live figures next to the agent's lists.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("DOCKER_HOST", None)
    cmd = [sys.executable, "-m", "flowcon.cli", "status", "--config", str(agent.cfg_path)]
    js = subprocess.run([*cmd, "--json"], capture_output=True, text=True, env=env, timeout=60)
    assert js.returncode == 0, js.stderr
    data = json.loads(js.stdout)
    assert data["engine"]["answered"] is True
    rows = {row["container_id"]: row for row in data["containers"]}
    live = rows[steady.id]["live"]
    assert live["running"]
    assert live["mem_bytes"] > 0
    assert live["cpu_percent"] is not None
    assert 0 < live["cpus_limit"] <= host_cpus  # the agent limited it (it moves every second)
    table = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    assert table.returncode == 0, table.stdout
    assert "live from the engine" in table.stdout, table.stdout
    assert f"fc-{run_id}-steady" in table.stdout

    # SIGTERM: every managed container gets its original settings back.
    assert agent.stop() == 0, agent.text()[-3000:]
    assert host_cfg(medium)["NanoCpus"] == 3 * NANO // 2  # exact original
    for c in (fast, steady, new):  # originally unlimited: the whole host (see docs)
        assert host_cfg(c)["NanoCpus"] == host_cpus * NANO
    assert host_cfg(plain)["NanoCpus"] == 0
    log = agent.text()
    assert "decision container=" in log
    assert "reason=" in log
    assert "restored container=" in log


def test_cgroup_cpu_agrees_with_engine_stats(docker_client, labeled, cleanup_containers):
    """The agent reads CPU time from the cgroup files; the engine's stats must agree."""
    from flowcon.engine.docker_engine import DockerEngine

    if not Path("/sys/fs/cgroup").is_dir():
        pytest.skip("no /sys/fs/cgroup here")
    busy = docker_client.containers.run(
        TESTBOX_IMAGE,
        ["sh", "-c", "while :; do :; done"],
        detach=True,
        labels=labeled(),
        network_mode="none",
        nano_cpus=NANO // 2,  # half a CPU: a steady rate, and the shared host keeps a core
    )
    eng = DockerEngine()
    try:
        info = eng.inspect(busy.id)
        first = eng.cgroup_usage(busy.id, info.cgroup_parent, info.pid)
        assert first is not None, "cgroup files of a local container not found"
        # The engine samples the same counter between our request and its answer.
        for _ in range(3):
            before = eng.cgroup_usage(busy.id)
            stats = eng.stats(busy.id)
            after = eng.cgroup_usage(busy.id)
            assert before is not None
            assert after is not None
            assert before.cpu_ns <= stats.cpu_ns <= after.cpu_ns
            assert after.mem_bytes is not None
            assert abs(after.mem_bytes - stats.mem_bytes) <= max(stats.mem_bytes // 10, 1 << 20)
        time.sleep(2.0)
        last = eng.cgroup_usage(busy.id)
        assert last is not None
        rate = (last.cpu_ns - first.cpu_ns) / ((last.at - first.at) * 1e9)
        # ns, not µs or ticks (a loaded shared host may give it less than its half CPU)
        assert 0.1 < rate <= 0.55, f"busy container at --cpus 0.5 used {rate:.2f} CPU"
    finally:
        eng.close()
        busy.remove(force=True)


# ----- engine restart on a private dockerd ------------------------------------------------


@pytest.fixture
def private_engine(tmp_path: Path) -> Iterator[PrivateEngine]:
    try:
        eng, created_bridge = setup_private(tmp_path / "dockerd.log")
    except EngineUnavailable as exc:
        pytest.skip(str(exc))
    try:
        yield eng
    finally:
        teardown_private(eng, created_bridge)


def test_agent_survives_engine_restart(private_engine, tmp_agent, tmp_path):
    import docker

    client = docker.DockerClient(base_url=PRIVATE_HOST, timeout=30)
    labels = {"flowcon.enable": "true", "flowcon.cpus.max": "0.5"}
    # Regression: starting a second engine must not take the main engine's bridge away.
    main_bridge = Path("/sys/class/net/docker0")
    main_bridge_before = main_bridge.exists()

    def run(name: str) -> Any:
        return client.containers.run(
            TESTBOX_IMAGE, job("1000000-i*10"), detach=True, name=name, labels=labels,
            network_mode="none",
        )  # fmt: skip

    agent = AgentProc(
        tmp_path,
        control="quota",
        itval=1,
        itval_max=2,
        reconnect_max=1,
        docker_host=PRIVATE_HOST,
    )
    tmp_agent.append(agent)
    before = run("before-restart")
    wait_for(lambda: host_cfg(before)["NanoCpus"] == NANO // 2, 20, "limit before restart")

    private_engine.stop()  # the engine goes away (its containers stop with it)
    time.sleep(1.5)
    assert agent.proc.poll() is None, agent.text()[-3000:]
    private_engine.start()
    client = docker.DockerClient(base_url=PRIVATE_HOST, timeout=30)

    after = run("after-restart")
    wait_for(lambda: host_cfg(after)["NanoCpus"] == NANO // 2, 20, "limit after restart")
    assert agent.proc.poll() is None
    assert "event stream connected" in agent.text()
    assert agent.stop() == 0
    assert host_cfg(after)["NanoCpus"] == client.info()["NCPU"] * NANO  # restored
    for c in client.containers.list(ignore_removed=True, all=True):
        c.remove(force=True)
    assert main_bridge.exists() == main_bridge_before, "the private engine removed docker0"
