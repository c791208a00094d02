"""`flowcon agent --once` and `flowcon status` as an operator meets them, against stub
engines (tests/support/stub_engine.py) and a socket nobody listens on: exit codes, the engine
named in errors, the start-up message, label errors in the state, status and metrics."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.stub_engine import ENGINE_29, TOO_OLD, StubEngine

from flowcon.agent.config import Config
from flowcon.agent.daemon import Agent, opt_in_hint, watching_line

REPO = Path(__file__).resolve().parents[2]
BAD = "f" * 64


def flowcon(*args: str, cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k != "FLOWCON_LOG_LEVEL"}
    full.update(PYTHONPATH=str(REPO), **env)
    return subprocess.run(
        [sys.executable, "-m", "flowcon", *args],
        capture_output=True,
        text=True,
        env=full,
        cwd=cwd,
        timeout=60,
    )


def config(tmp_path: Path, host: str, **extra: object) -> Path:
    path = tmp_path / "agent.yaml"
    conf = {"docker_host": host, "state_file": str(tmp_path / "state.json"), **extra}
    path.write_text(yaml.safe_dump(conf))
    return path


def test_once_fails_when_no_engine_answers(tmp_path: Path) -> None:
    url = f"unix://{tmp_path / 'missing.sock'}"
    out = flowcon("agent", "--once", "--config", str(config(tmp_path, url)), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert f"Error: round not run: version: cannot connect to the Docker engine at {url}: " in (
        out.stderr
    )
    assert "Traceback" not in out.stderr


def test_once_fails_on_an_engine_too_old(tmp_path: Path) -> None:
    with StubEngine(tmp_path / "e.sock", TOO_OLD) as stub:
        out = flowcon("agent", "--once", "--config", str(config(tmp_path, stub.url)), cwd=tmp_path)
    assert out.returncode == 1
    assert f"the Docker engine at {stub.url} (Docker 19.03.15) speaks API up to 1.40" in out.stderr


def test_once_on_engine_29_and_label_errors_shown(tmp_path: Path) -> None:
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        stub.add("a" * 64, "good", {"flowcon.enable": "True"})
        stub.add(BAD, "typo", {"flowcon.enable": "yes"})
        cfg = config(tmp_path, stub.url, min_update_cpus=0)
        out = flowcon("agent", "--once", "--config", str(cfg), cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        assert "(Docker 29.0.0, API 1.45)" in out.stderr
        assert "apscheduler" not in out.stderr
        state = json.loads((tmp_path / "state.json").read_text())
        assert list(state["containers"]) == ["a" * 64]  # the typo is left alone
        assert state["containers"]["a" * 64]["managed"] is True
        assert f"/v1.45/containers/{'a' * 64}/json" in stub.paths
        assert not any(BAD in p for p in stub.paths)
        err = state["label_errors"][BAD]
        assert err["name"] == "typo"
        assert "flowcon.enable='yes' is not a boolean" in err["error"]

        table = flowcon("status", "--no-engine", "--config", str(cfg), cwd=tmp_path)
        assert table.returncode == 0, table.stderr
        line = next(x for x in table.stdout.splitlines() if x.startswith("label error:"))
        assert line.startswith(f"label error: {BAD[:12]} typo: flowcon.enable='yes' is not a")
        js = flowcon("status", "--json", "--config", str(cfg), cwd=tmp_path)
        assert js.returncode == 0, js.stderr
        data = json.loads(js.stdout)
        assert data["engine"]["answered"] is True  # status negotiates too
        assert data["label_errors"] == [{"container_id": BAD, **err}]


def test_label_errors_counted_once(tmp_path: Path) -> None:
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        stub.add(BAD, "typo", {"flowcon.enable": "on"})
        cfg = Config(docker_host=stub.url, state_file=str(tmp_path / "s.json"))
        agent = Agent(cfg)
        assert agent.run_once()
        assert agent.run_once()
        assert agent.exporter is not None
        value = agent.exporter.registry.get_sample_value(
            "flowcon_agent_label_errors_total", {"id": f"/docker/{BAD}", "name": "typo"}
        )
        assert value == 1.0
        agent.engine.close()


def test_start_up_says_what_it_watches(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        cfg = Config(
            docker_host=stub.url, state_file=str(tmp_path / "s.json"), match_labels={"team": "a"}
        )
        agent = Agent(cfg)
        caplog.clear()
        with caplog.at_level(logging.INFO, "flowcon.agent"):
            agent._greet()
        agent.engine.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "flowcon.agent"]
    assert lines[0] == watching_line(stub.url, "Docker 29.0.0, API 1.45", {"team": "a"})
    assert lines[1] == (
        "no container is opted in yet; opt one in with: docker run -d --label team=a "
        "--label flowcon.enable=true --label flowcon.metric=loss IMAGE"
    )


def test_start_up_lines() -> None:
    assert watching_line("unix:///var/run/docker.sock", "Docker 20.10.24, API 1.41", {}) == (
        "watching the Docker engine at unix:///var/run/docker.sock (Docker 20.10.24, API 1.41) "
        "for containers labelled flowcon.enable=true (CPU limits managed) or flowcon.job=NAME "
        "(measured only)"
    )
    assert opt_in_hint({}).endswith(
        "docker run -d --label flowcon.enable=true --label flowcon.metric=loss IMAGE"
    )


def test_start_up_with_no_engine(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    url = f"unix://{tmp_path / 'missing.sock'}"
    agent = Agent(Config(docker_host=url, state_file=str(tmp_path / "s.json")))
    with caplog.at_level(logging.INFO, "flowcon.agent"):
        agent._greet()
    (line,) = [r.getMessage() for r in caplog.records if r.name == "flowcon.agent"]
    assert f"cannot connect to the Docker engine at {url}" in line
    assert line.endswith("the agent keeps trying")


def test_status_control_column() -> None:
    from flowcon.agent.cli import _control
    from flowcon.agent.state_file import ContainerRecord

    def rec(**kw: object) -> ContainerRecord:
        return ContainerRecord(id="x", name="x", managed=True, **kw)  # type: ignore[arg-type]

    assert _control(rec()) == "orig"
    assert _control(ContainerRecord(id="x", name="x", managed=False)) == "-"
    assert _control(rec(applied_cpus=1.0)) == "quota"  # an older state file: quota
    assert _control(rec(applied_cpus=1.0, applied_mode="weights", applied_shares=683)) == (
        "shares=683"
    )
    full = rec(
        applied_cpus=1.0,
        applied_mode="cpuset",
        applied_shares=1024,
        applied_cpuset="0",
        applied_cap=0.5,
    )
    assert _control(full) == "shares=1024 cap=0.5 cpuset=0"
