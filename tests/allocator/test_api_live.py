"""The allocator's /healthz (200 / 503), /api/v1/history and /ui on a real local server
(plan-only daemon, no executor)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any

import pytest

from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.client.http import AllocatorClient

PROFILE = {"1": 10.0, "2": 18.0, "4": 32.0}


def get(url: str, token: str | None = None) -> tuple[int, Any]:
    req = urllib.request.Request(url)
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
            ctype = r.headers["Content-Type"]
            return r.status, json.loads(body) if "json" in ctype else body
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def daemon(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=1.0, listen="127.0.0.1:0")
    alloc = Allocator(cfg, target=None, total_gpus=4)
    alloc.start(port=0)
    yield alloc
    alloc.stop()


def job(name: str, iterations: int, deadline: float | None) -> dict[str, Any]:
    out: dict[str, Any] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["true"],
        "global_batch_size": 16,
        "iterations": iterations,
        "profile": PROFILE,
        "env": {"SECRET": "hunter2"},
    }
    if deadline is None:
        out["best_effort"] = True
    else:
        out["deadline"] = deadline
    return out


def test_history_has_jobs_gpus_over_time_and_decisions(daemon) -> None:
    client = AllocatorClient(daemon.url, daemon.token, timeout=10)
    client.submit(job("fits", 3000, 600))
    client.submit(job("impossible", 10**7, 60))
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        status, hist = get(daemon.url + "/api/v1/history", daemon.token)
        if any("fits" in p["jobs"] for p in hist["gpus"]):
            break
        time.sleep(0.2)
    assert status == 200
    assert hist["total_gpus"] == 4
    jobs = {j["name"]: j for j in hist["jobs"]}
    assert jobs["fits"]["state"] in ("running", "admitted")
    assert jobs["fits"]["gpus"] >= 1
    assert jobs["fits"]["predicted_finish"] <= jobs["fits"]["deadline"]
    assert jobs["impossible"]["state"] == "dropped"
    assert "env" not in jobs["fits"]
    assert "spec" not in jobs["fits"]
    assert "hunter2" not in json.dumps(hist)
    decisions = {a["job"]: a for a in hist["admissions"]}
    assert decisions["fits"]["admitted"]
    assert not decisions["impossible"]["admitted"]
    assert decisions["impossible"]["reason"]
    assert any(p["jobs"].get("fits", 0) >= 1 for p in hist["gpus"])
    last = hist["gpus"][-1]["ts"]
    assert get(daemon.url + f"/api/v1/history?since={last}", daemon.token)[1]["gpus"] == []
    assert get(daemon.url + "/api/v1/history?since=soon", daemon.token)[0] == 400
    # the history is a read like the job list: no token, no history
    assert get(daemon.url + "/api/v1/history")[0] == 401
    status, page = get(daemon.url + "/ui")
    assert status == 200
    assert b"FlowCon allocator" in page
    assert get(daemon.url + "/static/allocator.js")[0] == 200


def test_healthz_503_when_the_loop_is_stuck(daemon) -> None:
    status, body = get(daemon.url + "/healthz")
    assert status == 200
    assert body["status"] == "ok"
    assert body["component"] == "allocator"
    real = daemon.liveness.clock
    daemon.liveness.clock = lambda: real() + 3600  # an hour without an iteration
    status, body = get(daemon.url + "/healthz")
    assert status == 503
    assert "no round completed" in body["problems"][0]


def test_healthz_503_and_error_counter_when_rounds_fail(daemon) -> None:
    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("cannot connect to the Docker engine at unix:///gone.sock")

    daemon.planner.plan = broken
    daemon.wake()
    end = time.monotonic() + 10
    while get(daemon.url + "/healthz")[0] == 200 and time.monotonic() < end:
        time.sleep(0.1)
    status, body = get(daemon.url + "/healthz")
    assert status == 503
    assert body["engine"] == "failing"
    assert "unix:///gone.sock" in body["last_round_error"]
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    name = "flowcon_allocator_round_errors_total"
    errors = [ln for ln in text.splitlines() if ln.startswith(name)]
    assert errors
    assert float(errors[0].split()[-1]) >= 1
