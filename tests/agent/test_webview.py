"""flowcon/agent/webview.py: the agent's HTTP endpoints on a real local server, and /healthz
turning 503 when the round loop stops or the engine fails (the daemon's wiring)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from flowcon.agent.exporter import Exporter
from flowcon.agent.webview import AgentWeb
from flowcon.web.health import Liveness
from flowcon.web.history import History
from flowcon.web.server import HttpServer


class Clock:
    t = 100.0

    def __call__(self) -> float:
        return self.t


def get(url: str) -> tuple[int, bytes, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as r:
            return r.status, r.read(), r.headers["Content-Type"]
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(), exc.headers["Content-Type"]


@pytest.fixture
def served() -> Any:
    clock = Clock()
    web = AgentWeb(Exporter(), Liveness(20.0, clock=clock), History(10), 4, node="n1")
    srv = HttpServer(web.route, "127.0.0.1", 0)
    srv.start()
    yield web, clock, f"http://127.0.0.1:{srv.port}"
    srv.stop()


VIEW = {
    "container_id": "a" * 64,
    "name": "train-a",
    "job": "j1",
    "list": "WL",
    "managed": True,
    "g": 0.4,
    "limit": 0.5,
    "cpus": 2.0,
    "cpu_share": 0.45,
    "step": 120,
    "mem_bytes": 123,
}


def test_endpoints(served: Any) -> None:
    web, _clock, url = served
    web.record_round([VIEW], 20.0)
    status, body, ctype = get(url + "/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    assert 'flowcon_container_cpu_limit_cpus{id="/docker/' + "a" * 64 in body.decode()
    status, body, _ = get(url + "/healthz")
    health = json.loads(body)
    assert status == 200
    assert health["status"] == "ok"
    assert health["node"] == "n1"
    status, body, _ = get(url + "/api/history")
    hist = json.loads(body)
    assert status == 200
    assert hist["host_cpus"] == 4
    assert hist["node"] == "n1"
    (point,) = hist["points"]
    assert point["itval"] == 20.0
    assert point["containers"]["a" * 64]["list"] == "WL"
    assert "mem_bytes" not in point["containers"]["a" * 64]
    later = get(url + f"/api/history?since={point['ts']}")[1]
    assert json.loads(later)["points"] == []
    assert get(url + "/api/history?since=x")[0] == 400
    status, body, ctype = get(url + "/ui")
    assert status == 200
    assert ctype.startswith("text/html")
    assert b"FlowCon agent" in body
    assert get(url + "/static/agent.js")[0] == 200
    assert get(url + "/nope")[0] == 404


def test_healthz_503_when_stuck_or_engine_gone(served: Any) -> None:
    web, clock, url = served
    web.record_round([], 20.0)
    clock.t += 61  # three 20 s intervals without a round
    status, body, _ = get(url + "/healthz")
    assert status == 503
    assert "no round completed" in json.loads(body)["problems"][0]
    web.record_round([], 20.0)
    assert get(url + "/healthz")[0] == 200
    web.liveness.engine_failed("cannot connect to the Docker engine at unix:///gone.sock")
    status, body, _ = get(url + "/healthz")
    assert status == 503
    assert json.loads(body)["engine"] == "failing"
