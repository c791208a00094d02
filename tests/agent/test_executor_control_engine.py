"""The agent's control modes on the real engine: the executor, driven by the controller,
sets quotas, CPU weights or cpusets as ``control`` says, seen in the containers' own
cgroup files and in ``docker inspect``, and gives every original back at restore."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from flowcon.agent.config import Config
from flowcon.agent.controller import Controller
from flowcon.agent.state_file import StateStore
from flowcon.engine.docker_engine import DockerEngine

pytestmark = pytest.mark.docker

TESTBOX_IMAGE = "flowcon/testbox:latest"
ON = {"flowcon.enable": "true"}
NANO = 10**9


def loop(threads: bool) -> list[str]:
    extra = ',"threads":2' if threads else ""
    return [
        "sh",
        "-c",
        "i=0; while true; do i=$((i+1)); "
        f'printf \'{{"step":%d,"loss":%d{extra}}}\\n\' $i $((100000-i)); sleep 0.1; done',
    ]


def cat(container: Any, path: str) -> str | None:
    rc, out = container.exec_run(["cat", path])
    return out.decode().strip() if rc == 0 else None


def cgroup(container: Any) -> dict[str, Any]:
    """The container's CPU settings as its cgroup files hold them (v1 or v2), as
    shares, quota (CPUs; None: no quota) and effective cpus."""
    shares = cat(container, "/sys/fs/cgroup/cpu/cpu.shares")
    if shares is not None:  # cgroup v1
        quota = int(cat(container, "/sys/fs/cgroup/cpu/cpu.cfs_quota_us") or -1)
        period = int(cat(container, "/sys/fs/cgroup/cpu/cpu.cfs_period_us") or 100_000)
        cpus = cat(container, "/sys/fs/cgroup/cpuset/cpuset.effective_cpus")
        return {
            "weight": int(shares),
            "quota": None if quota < 0 else quota / period,
            "cpus": cpus,
        }
    raw_max = (cat(container, "/sys/fs/cgroup/cpu.max") or "max 100000").split()
    return {
        "weight": int(cat(container, "/sys/fs/cgroup/cpu.weight") or 0),
        "quota": None if raw_max[0] == "max" else int(raw_max[0]) / int(raw_max[1]),
        "cpus": cat(container, "/sys/fs/cgroup/cpuset.cpus.effective"),
    }


def weight(container: Any, shares: int) -> int:
    """What the cgroup file shows for ``shares`` (v2: the runtime's conversion)."""
    if cat(container, "/sys/fs/cgroup/cpu/cpu.shares") is not None:
        return shares
    return 1 + ((shares - 2) * 9999) // 262142


def host_config(container: Any) -> dict[str, Any]:
    container.reload()
    return container.attrs["HostConfig"]  # type: ignore[no-any-return]


@pytest.fixture
def agent(
    docker_client: Any, labeled: Any, cleanup_containers: None, tmp_path: Path
) -> Iterator[Callable[..., tuple[Controller, Callable[..., Any]]]]:
    """make(control) -> (controller, start(name, threads=False, **run_kwargs))."""
    engines: list[tuple[DockerEngine, Controller]] = []
    run_id = labeled()["flowcon.test"]
    host_cpus = os.cpu_count() or 1  # the local engine's host (GET /info can be slow)

    def make(control: str) -> tuple[Controller, Callable[..., Any]]:
        eng = DockerEngine()
        cfg = Config(
            control=control,  # type: ignore[arg-type]
            itval=1,
            min_update_cpus=0,
            cpu_source="engine",
            log_tail=50,
            state_file=str(tmp_path / f"{control}.json"),
            match_labels={"flowcon.test": run_id},
        )
        ctl = Controller(eng, cfg, host_cpus, StateStore(cfg.state_file))
        engines.append((eng, ctl))

        def start(name: str, threads: bool = False, **kw: Any) -> Any:
            return docker_client.containers.run(
                TESTBOX_IMAGE,
                loop(threads),
                detach=True,
                name=f"fc-{run_id}-{name}",
                labels=labeled(**ON),
                network_mode="none",
                **kw,
            )

        return ctl, start

    yield make
    for eng, ctl in engines:
        try:
            ctl.restore_all()
        finally:
            eng.close()


def needs_cores(docker_client: Any, n: int) -> int:
    cores = os.cpu_count() or 1
    if cores < n:
        pytest.skip(f"needs {n} cores, the engine has {cores}")
    return cores


def test_quota_mode_as_before(docker_client, agent) -> None:
    cores = needs_cores(docker_client, 2)
    ctl, start = agent("quota")
    a, b = start("a"), start("b")
    ctl.resync()
    for c in (a, b):  # L = 1/2 each: half the host as a CFS quota, weights untouched
        assert cgroup(c)["quota"] == pytest.approx(cores / 2)
        assert cgroup(c)["weight"] == weight(c, 1024)
        assert host_config(c)["NanoCpus"] == cores * NANO // 2
    assert ctl.restore_all() == 2
    assert cgroup(a)["quota"] == pytest.approx(cores)  # "no limit" goes back as the host


def test_weights_mode_applied_and_restored(docker_client, agent) -> None:
    cores = needs_cores(docker_client, 2)
    ctl, start = agent("weights")
    plain = start("a")
    limited = start("b", nano_cpus=NANO // 2)  # started with --cpus 0.5
    quota = start("c", cpu_quota=50_000, cpu_period=100_000, cpu_shares=512)
    ctl.resync()
    shares = round(1024 * cores / 3)  # L = 1/3 each
    for c in (plain, limited, quota):
        assert cgroup(c)["weight"] == weight(c, shares)
        assert host_config(c)["CpuShares"] == shares
    # nothing throttled: the quota lifted (the whole host, or -1 in quota form)
    assert cgroup(plain)["quota"] in (None, pytest.approx(cores))
    assert cgroup(limited)["quota"] == pytest.approx(cores)
    assert cgroup(quota)["quota"] is None
    assert host_config(quota)["CpuQuota"] == -1
    views = {v["name"].rsplit("-", 1)[1]: v for v in ctl.views()}
    assert (views["a"]["control"], views["a"]["shares"]) == ("weights", shares)

    assert ctl.restore_all() == 3
    assert cgroup(plain)["weight"] == weight(plain, 1024)
    assert host_config(plain)["CpuShares"] == 1024
    assert cgroup(limited)["quota"] == pytest.approx(0.5)
    assert host_config(limited)["NanoCpus"] == NANO // 2
    assert cgroup(quota)["quota"] == pytest.approx(0.5)
    assert cgroup(quota)["weight"] == weight(quota, 512)
    assert host_config(quota)["CpuQuota"] == 50_000


def test_cpuset_two_pinned_three_fall_back(docker_client, agent, caplog) -> None:
    cores = needs_cores(docker_client, 2)
    if cores != 2:
        pytest.skip("written for a 2-core host (one core each for two containers)")
    ctl, start = agent("cpuset")
    a, b = start("a"), start("b")
    with caplog.at_level(logging.INFO, logger="flowcon.agent"):
        ctl.resync()
        assert (cgroup(a)["cpus"], cgroup(b)["cpus"]) == ("0", "1")  # disjoint
        assert (host_config(a)["CpusetCpus"], host_config(b)["CpusetCpus"]) == ("0", "1")
        assert cgroup(a)["weight"] == weight(a, 1024)
        c = start("c")
        ctl.resync()
        ctl.resync()
    assert caplog.text.count("3 managed containers but 2 cores") == 1
    for x in (a, b, c):  # weights for that round: every core again
        assert cgroup(x)["cpus"] == "0-1"
        assert host_config(x)["CpuShares"] == round(1024 * 2 / 3)
    c.remove(force=True)
    with caplog.at_level(logging.INFO, logger="flowcon.agent"):
        time.sleep(0.2)
        ctl.resync()
    assert "cores pinned again" in caplog.text
    assert {cgroup(a)["cpus"], cgroup(b)["cpus"]} == {"0", "1"}
    assert ctl.restore_all() == 2
    for x in (a, b):
        assert cgroup(x)["cpus"] == "0-1"
        assert cgroup(x)["weight"] == weight(x, 1024)
        assert host_config(x)["CpuShares"] == 1024


def test_hybrid_quota_for_thread_aware_weights_for_the_rest(docker_client, agent) -> None:
    cores = needs_cores(docker_client, 2)
    ctl, start = agent("hybrid")
    aware = start("aware", threads=True)
    plain = start("plain", cpu_shares=256)
    ctl.resync()  # no lines read yet: both weights, no quota
    assert cgroup(aware)["quota"] in (None, pytest.approx(cores))
    assert host_config(plain)["CpuShares"] == 1024  # L = 1/2: one CPU's worth
    time.sleep(1.0)
    assert ctl.round()
    tracked = {t.name.rsplit("-", 1)[1]: t for t in ctl.tracked.values()}
    assert tracked["aware"].monitor.thread_aware
    assert tracked["aware"].applied_mode == "quota"
    assert tracked["plain"].applied_mode == "weights"
    lim = tracked["aware"].applied_cpus
    assert cgroup(aware)["quota"] == pytest.approx(lim, abs=0.01)  # throttled: it adapts
    assert cgroup(aware)["weight"] == weight(aware, 1024)
    assert cgroup(plain)["quota"] in (None, pytest.approx(cores))  # never throttled
    assert cgroup(plain)["weight"] == weight(plain, host_config(plain)["CpuShares"])
    assert ctl.restore_all() == 2
    assert cgroup(plain)["weight"] == weight(plain, 256)
    assert host_config(plain)["CpuShares"] == 256
    assert cgroup(aware)["quota"] == pytest.approx(cores)


def test_an_operators_update_during_a_round_is_never_overwritten(docker_client, agent) -> None:
    """The agent-foreign-change fault scenario's overwrite, made deterministic: an
    operator's ``docker update --cpus 0.7`` (the docker CLI) lands after a round has
    decided its limits and before it sends them. The change wins: it is never written
    over, the container is handed off, the others share the host."""
    needs_cores(docker_client, 2)
    ctl, start = agent("quota")
    a, b = start("a"), start("b")
    ctl.resync()
    save = ctl.executor.before_updates

    def operator_then_save() -> None:
        subprocess.run(["docker", "update", "--cpus", "0.7", b.id], check=True, capture_output=True)
        save()

    ctl.executor.before_updates = operator_then_save
    c = start("c")
    ctl.on_start(c.id)  # a and b get new limits: b's was changed meanwhile
    ctl.executor.before_updates = save
    assert host_config(b)["NanoCpus"] == 7 * NANO // 10
    t = ctl.tracked[b.id]
    assert not t.managed
    assert t.hands_off
    assert "-> 700000000" in t.hands_off
    assert sorted(ctl.pool.managed()) == sorted([a.id, c.id])
    ctl.round()
    assert host_config(b)["NanoCpus"] == 7 * NANO // 10
    assert ctl.restore_all() == 2  # a and c; b keeps the operator's setting
    assert host_config(b)["NanoCpus"] == 7 * NANO // 10
