"""flowcon/agent/daemon.py without an engine: the HTTP endpoints on the metrics port (a port in
use is logged, not fatal), and /healthz reporting the engine it cannot reach."""

from __future__ import annotations

import json
import logging
import socket
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from flowcon.agent.config import Config
from flowcon.agent.daemon import Agent
from flowcon.testing.ports import free_port


def _agent(tmp_path: Path, port: int) -> Agent:
    cfg = Config(
        state_file=str(tmp_path / "state.json"),
        docker_host=f"unix://{tmp_path / 'no-engine.sock'}",
        metrics_port=port,
        metrics_addr="127.0.0.1",
    )
    return Agent(cfg)


def test_metrics_port_serves_health_and_reports_the_missing_engine(tmp_path: Path) -> None:
    port = free_port()
    agent = _agent(tmp_path, port)
    agent._serve_http()
    assert agent.http is not None
    try:
        agent.controller.round()  # the engine does not answer: the round is skipped
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=10)
        body = json.loads(err.value.read())
        assert err.value.code == 503
        assert body["engine"] == "failing"
        assert body["problems"][-1].startswith("engine: ")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            text = r.read().decode()
        assert 'flowcon_agent_engine_errors_total{operation="list"} 1.0' in text
    finally:
        agent.http.stop()
        agent.engine.close()


def test_a_port_in_use_is_logged_not_fatal(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        agent = _agent(tmp_path, port)
        with caplog.at_level(logging.ERROR):
            agent._serve_http()
        agent.engine.close()
    assert agent.http is None
    assert f"cannot serve metrics on 127.0.0.1:{port}" in caplog.text
