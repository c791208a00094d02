"""The allocator's HTTP API on a real server (127.0.0.1, ephemeral port).

These run the daemon in plan-only mode (no executor: decisions and state, no containers);
tests/allocator/test_allocator_engine.py runs it with the real executor on the engine.
"""

from __future__ import annotations

import json
import time
import urllib.request
from typing import Any

import pytest

from flowcon.alloc.admission import admit
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator
from flowcon.client.http import AllocatorClient, ClientError

PROFILE = {1: 10.0, 2: 18.0, 4: 32.0, 8: 50.0}


def spec(name: str, iterations: int, deadline: float | str | None, **kw: object) -> dict[str, Any]:
    out: dict[str, object] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["sh", "-c", "true"],
        "global_batch_size": 16,
        "iterations": iterations,
        "profile": {str(k): v for k, v in PROFILE.items()},
        **kw,
    }
    if deadline is None:
        out["best_effort"] = True
    else:
        out["deadline"] = deadline
    return out


@pytest.fixture
def daemon(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "state", slot_seconds=1.0, listen="127.0.0.1:0")
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.start(port=0)
    yield alloc
    alloc.stop()


@pytest.fixture
def client(daemon):
    return AllocatorClient(daemon.url, daemon.token, timeout=10)


def test_health_and_metrics_without_token(daemon):
    anon = AllocatorClient(daemon.url, None)
    h = anon.health()
    assert h["status"] == "ok"
    assert h["total_gpus"] == 8
    assert h["schema_version"] >= 1
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert "flowcon_allocator_gpus 8.0" in text
    assert "flowcon_allocator_gpus_total" not in text
    assert 'flowcon_allocator_jobs{state="running"}' in text


@pytest.mark.parametrize("token", [None, "wrong-token"])
def test_changes_without_the_token_are_refused(daemon, client, token):
    client.submit(spec("keep", 500, 600))
    bad = AllocatorClient(daemon.url, token)
    events_before = daemon.store.count("events")
    with pytest.raises(ClientError) as err:
        bad.submit(spec("sneaky", 500, 600))
    assert err.value.status == 401
    with pytest.raises(ClientError) as err:
        bad.cancel("keep")
    assert err.value.status == 401
    with pytest.raises(ClientError) as err:
        bad.post_measurements("n1", [{"container_id": "c", "job": "keep", "step": 400}])
    assert err.value.status == 401
    assert [j["name"] for j in client.jobs()] == ["keep"]
    assert client.job("keep")["state"] in ("running", "admitted")
    assert daemon.store.count("measurements") == 0
    assert daemon.store.count("events") == events_before


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"iterations": -5}, "iterations"),
        ({"deadline": "soon"}, "deadline"),
        ({"name": "Bad Name"}, "name"),
        ({"gpus": 4}, "gpus"),
        ({"image": None}, "image"),
        # a plan-only daemon has no executor to pre-run the job
        ({"profile": "auto"}, "profile"),
    ],
)
def test_bad_spec_is_400_with_the_field_and_creates_nothing(daemon, client, patch, field):
    body = spec("job", 500, 600)
    body.update(patch)
    with pytest.raises(ClientError) as err:
        client.submit(body)
    assert err.value.status == 400
    assert err.value.body["field"] == field
    assert client.jobs() == []
    assert daemon.store.count("events") == 1  # only allocator_started
    assert daemon.store.count("admissions") == 0


def test_malformed_bodies_are_400(daemon):
    for data, ctype in [
        (b"{not json", "application/json"),
        (b"[1, 2]", "application/json"),
        (b"a: [1", "application/yaml"),
    ]:
        req = urllib.request.Request(
            daemon.url + "/api/v1/jobs",
            data=data,
            method="POST",
            headers={"Authorization": f"Bearer {daemon.token}", "Content-Type": ctype},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 400
    assert daemon.store.count("jobs") == 0


def test_submit_admits_and_drops_as_the_core_decides(daemon, client):
    now = time.time()
    admitted: list[Job] = []
    trace = [("a", 2400, 100), ("b", 1500, 120), ("c", 4000, 110), ("d", 300, 60), ("e", 10**6, 50)]
    seen = set()
    for name, its, dl in trace:
        core = Job(name, now, float(its), now + dl, ThroughputCurve(PROFILE))
        expected = admit(core, admitted, now, 8, 1.0)
        out = client.submit(spec(name, its, dl))
        assert out["admitted"] is expected.admitted, (name, out)
        assert out["decision"] == ("admitted" if expected.admitted else "dropped")
        seen.add(out["decision"])
        if expected.admitted:
            admitted.append(core)
            assert out["gpus"] >= 0
        else:
            assert out["reason"]
    assert seen == {"admitted", "dropped"}
    jobs = {j["name"]: j for j in client.jobs()}
    assert jobs["e"]["state"] == "dropped"
    assert "unsatisfiable" in jobs["e"]["reason"]
    assert sum(j["gpus"] for j in jobs.values()) <= 8
    detail = client.job("a")
    assert [a["admitted"] for a in detail["admissions"]] == [True]
    assert detail["events"][0]["kind"] == "admitted"


def test_duplicate_cancel_and_unknown(daemon, client):
    client.submit(spec("a", 500, 600))
    with pytest.raises(ClientError) as err:
        client.submit(spec("a", 500, 600))
    assert err.value.status == 409
    assert client.cancel("a")["state"] == "cancelled"
    with pytest.raises(ClientError) as err:
        client.cancel("a")
    assert err.value.status == 409
    with pytest.raises(ClientError) as err:
        client.job("nope")
    assert err.value.status == 404
    # a finished name can be submitted again
    assert client.submit(spec("a", 500, 600))["admitted"] is True


def test_measurements_refine_the_curve_through_http(daemon, client):
    out = client.submit(spec("a", 2400, 100))
    gpus = out["gpus"]
    assert gpus > 0
    slow = PROFILE[gpus] * 0.5
    rows = [
        {
            "container_id": "c1",
            "name": "flowcon-a--node1",
            "job": "a",
            "step": 40,
            "iterations_per_s": slow,
            "metric": "loss",
            "value": 0.5,
            "ts": time.time(),
        },
        {
            "container_id": "c1",
            "name": "flowcon-a--node1",
            "job": "a",
            "step": 50,
            "iterations_per_s": slow,
            "metric": "loss",
            "value": 0.4,
            "ts": time.time() + 0.01,
        },
        {
            "container_id": "c9",
            "name": "other",
            "job": None,
            "step": 3,
            "iterations_per_s": 1.0,
            "metric": None,
            "value": None,
            "ts": time.time(),
        },
        {"container_id": "c1", "job": "a", "iterations_per_s": float("nan")},
        "garbage",
    ]
    # json.dumps writes NaN, which Python's json accepts: the row must be skipped, not crash
    res = client.post_measurements("node1", rows)
    assert res["received"] == 5
    assert res["refined"] == 1
    assert res["replan"] is True
    assert res["skipped"] == 1
    job = client.job("a")
    assert job["measured"][str(gpus)] == pytest.approx(slow)
    assert job["curve"][str(gpus)] == pytest.approx(slow)
    assert job["curve"]["1"] == pytest.approx(PROFILE[1] * 0.5)
    assert job["done_iterations"] >= 50
    kinds = [e["kind"] for e in job["events"]]
    assert "curve_refined" in kinds
    assert daemon.store.count("measurements") == 4
    with urllib.request.urlopen(daemon.url + "/metrics", timeout=10) as resp:
        text = resp.read().decode()
    assert 'flowcon_allocator_measurements_total{outcome="refined"} 1.0' in text


def test_measurement_body_must_have_node_and_list(daemon):
    for body in ({"measurements": []}, {"node": "n", "measurements": {}}):  # type: ignore[var-annotated]
        req = urllib.request.Request(
            daemon.url + "/api/v1/measurements",
            data=json.dumps(body).encode(),
            method="POST",
            headers={"Authorization": f"Bearer {daemon.token}"},
        )
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 400


def test_state_survives_a_daemon_restart(tmp_path):
    cfg = AllocatorConfig(state_dir=tmp_path / "s", slot_seconds=1.0)
    a1 = Allocator(cfg, target=None, total_gpus=8)
    a1.start(port=0)
    c1 = AllocatorClient(a1.url, a1.token)
    c1.submit(spec("a", 2400, 100))
    token = a1.token
    a1.stop()
    a2 = Allocator(cfg, target=None, total_gpus=8)
    a2.start(port=0)
    try:
        assert a2.token == token  # from the 0600 token file
        c2 = AllocatorClient(a2.url, a2.token)
        assert [j["name"] for j in c2.jobs()] == ["a"]
        kinds = [e.kind for e in a2.store.events()]
        assert kinds.count("allocator_started") == 2
        assert "allocator_stopped" in kinds
    finally:
        a2.stop()


def test_the_views_read_back_the_wire_exactly(daemon, client):
    """The client commands read the answers as views (flowcon.allocator.views); a view
    read from an answer writes back the same JSON (``-o json`` prints it)."""
    from flowcon.allocator.views import JobDetail, JobView, LogPage, SubmitAnswer

    first = client.submit(spec("a", 500, 600, env={"K": "v"}))
    assert SubmitAnswer.from_json(first).json == first
    client.submit(spec("b", 100, None))
    client.cancel("b")
    listing = client.jobs()
    assert [JobView.from_json(j).to_json() for j in listing] == listing
    for name in ("a", "b"):
        detail = client.job(name)
        assert JobDetail.from_json(detail).to_json() == detail
        assert detail["events"]
        assert detail["admissions"]
    page = client.logs("a")
    assert LogPage.from_json(page).to_json() == page
