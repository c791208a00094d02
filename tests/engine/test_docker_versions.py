"""API version negotiation against stub engines of several releases (a Unix socket each):
the newest version both sides speak, a clear refusal outside FlowCon's range, a new
negotiation after the engine says "client version X is too old", and an agent round on
an engine that refuses API 1.41 (Engine 29)."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.stub_engine import BOOKWORM, ENGINE_29, TOO_NEW, TOO_OLD, TRIXIE, Release, StubEngine

from flowcon.agent.config import Config
from flowcon.agent.controller import Controller
from flowcon.agent.state_file import StateStore
from flowcon.engine.api_version import (
    MAX_API,
    MIN_API,
    UnsupportedEngine,
    is_wrong_version,
    negotiate,
)
from flowcon.engine.docker_engine import DockerEngine, EngineUnavailable, EngineVersionError

ON = {"flowcon.enable": "true"}


def test_negotiate_is_pure() -> None:
    assert (MIN_API, MAX_API) == ("1.41", "1.45")
    assert negotiate(ENGINE_29.answer(), "x").api == "1.45"
    assert negotiate(BOOKWORM.answer(), "x").api == "1.41"
    assert negotiate({"ApiVersion": "1.43", "Version": "24.0"}, "x").api == "1.43"  # no min
    for bad in ({}, {"ApiVersion": ""}, {"ApiVersion": "one.two"}, "garbage", None):
        with pytest.raises(UnsupportedEngine):
            negotiate(bad, "x")
    assert is_wrong_version("client version 1.41 is too old. Minimum supported API version")
    assert is_wrong_version("client version 1.50 is too new. Maximum supported API version")
    assert not is_wrong_version("No such container: abc")


@pytest.mark.parametrize(
    ("release", "spoken"), [(BOOKWORM, "1.41"), (TRIXIE, "1.45"), (ENGINE_29, "1.45")]
)
def test_speaks_the_newest_version_both_know(tmp_path: Path, release: Release, spoken: str) -> None:
    with StubEngine(tmp_path / "e.sock", release) as stub:
        stub.add("c1", "one", ON)
        eng = DockerEngine(stub.url, cgroup_root=None)
        for _ in range(3):
            assert [c.name for c in eng.list_running()] == ["one"]
        assert eng.inspect("c1").labels == ON
        assert eng.version().api == spoken
        assert stub.paths[0] == "/version"
        assert stub.paths.count("/version") == 1  # once
        assert stub.versions == {spoken}
        assert all(p.startswith(("/version", f"/v{spoken}/")) for p in stub.paths)
        eng.close()


def test_engine_29_refuses_the_old_pin(tmp_path: Path) -> None:
    """Seen against Engine 29: a fixed /v1.41 gets its refusal (the stub is faithful)."""
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        eng = DockerEngine(stub.url, cgroup_root=None)
        with eng.http.open("GET", "/v1.41/containers/json") as resp:
            status, body = resp.status, resp.read()
        assert status == 400
        assert b"client version 1.41 is too old" in body
        eng.close()


@pytest.mark.parametrize(
    ("release", "says"),
    [
        (TOO_OLD, "speaks API up to 1.40; FlowCon speaks API 1.41 to 1.45"),
        (TOO_NEW, "speaks API 1.50 or newer only; FlowCon speaks API 1.41 to 1.45"),
    ],
)
def test_refuses_an_engine_outside_our_range(tmp_path: Path, release: Release, says: str) -> None:
    with StubEngine(tmp_path / "e.sock", release) as stub:
        eng = DockerEngine(stub.url, cgroup_root=None)
        with pytest.raises(EngineVersionError) as err:
            eng.list_running()
        assert f"the Docker engine at {stub.url} (Docker {release.version}) {says}" in str(
            err.value
        )
        assert stub.versions == set()  # no versioned call was even tried
        eng.close()


def test_negotiates_again_after_too_old(tmp_path: Path) -> None:
    """The engine is upgraded in place (same socket, kept-alive connection): its "too
    old" makes the adapter ask /version again and send the call once more."""
    with StubEngine(tmp_path / "e.sock", BOOKWORM) as stub:
        stub.add("c1", "one", ON)
        eng = DockerEngine(stub.url, cgroup_root=None)
        assert len(eng.list_running()) == 1
        assert eng.version().api == "1.41"
        stub.release = ENGINE_29
        assert len(eng.list_running()) == 1
        assert eng.version().api == "1.45"
        assert stub.paths.count("/version") == 2
        assert [p for p in stub.paths if p.startswith("/v1.41/")][-1].startswith(
            "/v1.41/containers/json"
        )  # refused, then sent again as 1.45
        assert stub.paths[-1].startswith("/v1.45/containers/json")
        eng.close()


def test_unreachable_engine_is_named(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'missing.sock'}"
    eng = DockerEngine(url, cgroup_root=None)
    with pytest.raises(EngineUnavailable, match=f"cannot connect to the Docker engine at {url}: "):
        eng.list_running()
    with pytest.raises(EngineUnavailable, match="cannot connect to the Docker engine at"):
        eng.version()


def test_agent_round_on_engine_29(tmp_path: Path) -> None:
    """The agent's round (list, inspect, logs, stats, update) on an engine that refuses
    1.41: limits are applied, all over API 1.45."""
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        stub.add("a" * 64, "fast", ON)
        stub.add("b" * 64, "slow", ON)
        stub.add("c" * 64, "plain", {})
        cfg = Config(
            itval=1, min_update_cpus=0, cpu_source="engine", state_file=str(tmp_path / "s.json")
        )
        eng = DockerEngine(stub.url, cgroup_root=None)
        ctl = Controller(eng, cfg, stub.ncpu, StateStore(cfg.state_file))
        ctl.resync("start")
        for step in range(1, 6):
            stub.emit("a" * 64, step, 100 / step)
            stub.emit("b" * 64, step, 100 - step)
            assert ctl.round() is True
        assert {cid for cid, _ in stub.updates} == {"a" * 64, "b" * 64}  # not "plain"
        assert all("NanoCpus" in body for _, body in stub.updates)
        assert stub.versions == {"1.45"}
        assert ctl.tracked["a" * 64].monitor.progress.step == 5  # logs were read
        eng.close()
