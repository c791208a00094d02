"""The allocator API's credentials, body limits, env redaction and input hygiene, on a real
HTTP server (the plan-only daemon on 127.0.0.1, an ephemeral port).

Every endpoint is called with each kind of token (none, wrong, read, user, agent,
operator) and must answer the status of the role table in flowcon.allocator.auth."""

from __future__ import annotations

import itertools
import json
import socket
import urllib.error
import urllib.request
from typing import Any

import pytest
from click.testing import CliRunner
from support.api_specs import api_job as job

from flowcon.allocator.config import AllocatorConfig
from flowcon.allocator.daemon import Allocator

TOKENS = {
    "none": None,
    "wrong": "not-a-token",
    "read": "read-token-1",
    "user": "user-token-1",
    "agent": "agent-token-1",
    "operator": "operator-token-1",
}
_names = (f"j{n}" for n in itertools.count())


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    cfg = AllocatorConfig(
        state_dir=tmp_path_factory.mktemp("auth") / "state",
        slot_seconds=1.0,
        listen="127.0.0.1:0",
        token=TOKENS["operator"],
        user_token=TOKENS["user"],
        read_token=TOKENS["read"],
        agent_token=TOKENS["agent"],
    )
    alloc = Allocator(cfg, target=None, total_gpus=8)
    alloc.start(port=0)
    status, _ = call(alloc, "POST", "/api/v1/jobs", "operator", job("keep"))
    assert status == 201
    yield alloc
    alloc.stop()


def call(
    daemon: Allocator,
    method: str,
    path: str,
    kind: str,
    body: Any = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(daemon.url + path, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    token = TOKENS[kind]
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw = exc.read()
        status = exc.code
    try:
        return status, json.loads(raw or b"{}")
    except json.JSONDecodeError:
        return status, raw.decode()


# what each kind of token gets, per endpoint (PUBLIC: anything but 401/403)
PUBLIC = "public"
R = {"none": 401, "wrong": 401, "read": 200, "user": 200, "agent": 403, "operator": 200}
SUBMIT = {"none": 401, "wrong": 401, "read": 403, "user": 201, "agent": 403, "operator": 201}
CANCEL = {"none": 401, "wrong": 401, "read": 403, "user": 200, "agent": 403, "operator": 200}
REPORT = {"none": 401, "wrong": 401, "read": 403, "user": 403, "agent": 200, "operator": 200}
DRY_RUN = {**SUBMIT, "user": 200, "operator": 200}  # a user's call that creates nothing
ENDPOINTS: list[tuple[str, str, Any]] = [
    ("GET", "/healthz", {k: 200 for k in TOKENS}),
    ("GET", "/metrics", {k: 200 for k in TOKENS}),
    ("GET", "/ui", {k: PUBLIC for k in TOKENS}),  # served by the web view when present
    ("GET", "/static/app.js", {k: PUBLIC for k in TOKENS}),
    ("GET", "/api/v1/jobs", R),
    ("GET", "/api/v1/jobs/keep", R),
    ("GET", "/api/v1/jobs/keep/", R),
    ("GET", "/api/v1/nothing-here", {**R, **{k: 404 for k in ("read", "user", "operator")}}),
    ("POST", "/api/v1/jobs", SUBMIT),
    ("POST", "/api/v1/jobs?dry_run=true", DRY_RUN),
    ("POST", "/api/v1/jobs?dry_run=1", DRY_RUN),
    ("POST", "/api/v1/jobs?dry_run=maybe", {**SUBMIT, "user": 400, "operator": 400}),
    ("GET", "/api/v1/jobs/keep/logs", R),
    ("GET", "/api/v1/jobs/keep/logs?rank=0&tail=5&after=0", R),
    ("GET", "/api/v1/jobs/keep/logs?rank=x", {**R, "read": 400, "user": 400, "operator": 400}),
    ("GET", "/api/v1/jobs/keep/logs?tail=-1", {**R, "read": 400, "user": 400, "operator": 400}),
    ("GET", "/api/v1/jobs/gone/logs", {**R, "read": 404, "user": 404, "operator": 404}),
    ("DELETE", "/api/v1/jobs/keep/logs", {**CANCEL, "user": 405, "operator": 405}),
    ("DELETE", "/api/v1/jobs/{victim}", CANCEL),
    ("POST", "/api/v1/measurements", REPORT),
    ("PUT", "/api/v1/jobs", {**SUBMIT, "user": 405, "operator": 405}),
]


@pytest.mark.parametrize(("method", "path", "expected"), ENDPOINTS, ids=lambda v: str(v)[:30])
@pytest.mark.parametrize("kind", list(TOKENS))
def test_each_token_kind_against_each_endpoint(
    daemon: Allocator, method: str, path: str, expected: dict[str, Any], kind: str
) -> None:
    body: Any = None
    path_template = path
    victim = next(_names)
    if "{victim}" in path:
        assert call(daemon, "POST", "/api/v1/jobs", "operator", job(victim))[0] == 201
        path = path.format(victim=victim)
    if method in ("POST", "PUT") and path.split("?")[0] == "/api/v1/jobs":
        body = job(victim)
    if path == "/api/v1/measurements":
        body = {"node": "n1", "measurements": [{"container_id": "c", "job": "keep", "step": 1}]}
    jobs_before = daemon.store.count("jobs")
    status, out = call(daemon, method, path, kind, body)
    if "dry_run" in path or "/logs" in path:
        assert daemon.store.count("jobs") == jobs_before  # whoever asks, nothing is created
        assert daemon.store.get_job("keep").state != "cancelled"  # type: ignore[union-attr]
    want = expected[kind]
    if want == PUBLIC:
        assert status not in (401, 403), (status, out)
        return
    assert status == want, (status, out)
    if status in (401, 403):
        assert "token" in out["error"]
        assert daemon.store.count("jobs") == jobs_before  # nothing was created
        if method == "DELETE" and "{victim}" in path_template:
            assert daemon.store.get_job(victim).state != "cancelled"  # type: ignore[union-attr]


def test_hmac_compare_and_header_forms(daemon: Allocator) -> None:
    ok = {"Authorization": f"bearer {TOKENS['read']}"}  # the scheme is case-insensitive
    req = urllib.request.Request(daemon.url + "/api/v1/jobs", headers=ok)
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 200
    for header in (
        TOKENS["read"],  # no scheme
        f"Basic {TOKENS['read']}",
        f"Bearer {TOKENS['read']}x",
        f"Bearer {TOKENS['read'][:-1]}",  # type: ignore[index]
        "Bearer ",
    ):
        req = urllib.request.Request(daemon.url + "/api/v1/jobs", headers={"Authorization": header})  # type: ignore[dict-item]
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(req, timeout=10)
        assert err.value.code == 401, header


def raw_request(daemon: Allocator, head: str, body: bytes = b"") -> tuple[int, bytes]:
    """Send ``head`` (request line + headers) and ``body`` as they are; the status and the
    answer, read without closing our side first."""
    assert daemon.server is not None
    with socket.create_connection(("127.0.0.1", daemon.server.port), timeout=5) as s:
        s.sendall(head.replace("\n", "\r\n").encode() + b"\r\n" + body)
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
        headers, _, rest = data.partition(b"\r\n\r\n")
        length = 0
        for line in headers.split(b"\r\n")[1:]:
            k, _, v = line.partition(b":")
            if k.strip().lower() == b"content-length":
                length = int(v)
        while len(rest) < length:
            chunk = s.recv(65536)
            if not chunk:
                break
            rest += chunk
    return int(headers.split(b" ")[1]), rest


def test_body_over_1_mib_is_413_before_it_is_sent(daemon: Allocator) -> None:
    before = daemon.store.count("jobs")
    status, body = raw_request(
        daemon,
        "POST /api/v1/jobs HTTP/1.1\nHost: t\nContent-Type: application/json\n"
        f"Authorization: Bearer {TOKENS['user']}\nContent-Length: {2 << 20}\n",
    )  # the body is never sent: the answer must come anyway
    assert status == 413
    assert json.loads(body)["limit"] == 1 << 20
    assert daemon.store.count("jobs") == before
    # a refused token is answered first (401), whatever the size
    status, _ = raw_request(
        daemon, f"POST /api/v1/jobs HTTP/1.1\nHost: t\nContent-Length: {2 << 20}\n"
    )
    assert status == 401
    # exactly at the limit is read (and then refused as a spec, not as a size)
    payload = b'{"pad": "' + b"x" * ((1 << 20) - 11) + b'"}'
    status, body = raw_request(
        daemon,
        "POST /api/v1/jobs HTTP/1.1\nHost: t\nContent-Type: application/json\n"
        f"Authorization: Bearer {TOKENS['user']}\nContent-Length: {len(payload)}\n",
        payload,
    )
    assert len(payload) == 1 << 20, body
    assert status == 400, body


@pytest.mark.parametrize(
    "extra", ["", "Transfer-Encoding: chunked\n"], ids=["no-length", "chunked"]
)
def test_body_without_content_length_is_411(daemon: Allocator, extra: str) -> None:
    status, body = raw_request(
        daemon,
        f"POST /api/v1/jobs HTTP/1.1\nHost: t\nAuthorization: Bearer {TOKENS['user']}\n{extra}",
    )
    assert status == 411
    assert "Content-Length" in json.loads(body)["error"]


@pytest.mark.parametrize(
    ("data", "ctype"),
    [(b"{not json", "application/json"), (b"\xff\xfe", "application/json"), (b"", "x")],
)
def test_bad_bodies_are_400(daemon: Allocator, data: bytes, ctype: str) -> None:
    status, body = raw_request(
        daemon,
        f"POST /api/v1/jobs HTTP/1.1\nHost: t\nAuthorization: Bearer {TOKENS['user']}\n"
        f"Content-Type: {ctype}\nContent-Length: {len(data)}\n",
        data,
    )
    assert status == 400, body
    status, _ = raw_request(
        daemon,
        f"POST /api/v1/jobs HTTP/1.1\nHost: t\nAuthorization: Bearer {TOKENS['user']}\n"
        "Content-Length: ten\n",
    )
    assert status == 400


def test_env_values_never_leave_the_api(daemon: Allocator, monkeypatch) -> None:
    name = next(_names)
    status, out = call(
        daemon, "POST", "/api/v1/jobs", "user", job(name, env={"API_KEY": "hunter2", "N": 3})
    )
    assert status == 201
    assert "hunter2" not in json.dumps(out)
    status, rows = call(daemon, "GET", "/api/v1/jobs", "read")
    mine = [r for r in rows["jobs"] if r["name"] == name]
    assert mine[0]["spec"]["env"] == {"API_KEY": "***", "N": "***"}
    assert "hunter2" not in json.dumps(rows)
    status, one = call(daemon, "GET", f"/api/v1/jobs/{name}", "read")
    assert one["spec"]["env"] == {"API_KEY": "***", "N": "***"}
    assert "hunter2" not in json.dumps(one)
    # the CLI prints what the API returns: names only
    from flowcon.cli import main

    for var in ("FLOWCON_ALLOCATOR_CONFIG", "FLOWCON_ALLOCATOR_TOKEN", "FLOWCON_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    for args in (["jobs", "--json"], ["jobs"]):
        res = CliRunner().invoke(main, [*args, "--url", daemon.url, "--token", TOKENS["read"]])  # type: ignore[list-item]
        assert res.exit_code == 0, res.output
        assert name in res.output
        assert "hunter2" not in res.output
    status, gone = call(daemon, "DELETE", f"/api/v1/jobs/{name}", "user")
    assert status == 200
    assert "hunter2" not in json.dumps(gone)
    # the store keeps the value: the containers need it
    assert daemon.store.get_job(name).spec.env["API_KEY"] == "hunter2"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("patch", "field"),
    [
        ({"name": "Bad"}, "name"),
        ({"name": "1abc"}, "name"),
        ({"name": "a" * 41}, "name"),
        ({"name": "ab-"}, "name"),
        ({"name": "a_b"}, "name"),
        ({"name": "../x"}, "name"),
        ({"name": "a;rm -rf /"}, "name"),
        ({"name": 5}, "name"),
        ({"image": "x;rm -rf /"}, "image"),
        ({"image": "img$(id)"}, "image"),
        ({"image": "../../etc"}, "image"),
        ({"image": "UPPER/case"}, "image"),
        ({"profile": "../../etc/passwd"}, "profile"),
        ({"profile": "/etc/passwd"}, "profile"),  # the daemon reads no file
        ({"profile": "prof.csv"}, "profile"),
        ({"command": ["sh", "-c", "a\x00b"]}, "command"),
        ({"env": {"A": "x\x00y"}}, "env.A"),
        ({"env": {"A;B": "x"}}, "env.A;B"),
        ({"iterations": "100"}, "iterations"),
        ({"best_effort": "no"}, "best_effort"),
        ({"workdir": "../tmp"}, "workdir"),
        ({"volumes": ["/etc/../:/host"]}, "volumes[0].source"),
        ({"wokdir": "/tmp"}, "wokdir"),  # a typo is an unknown key, not dropped
    ],
)
def test_bad_names_and_paths_are_400_naming_the_field(
    daemon: Allocator, patch: dict[str, Any], field: str
) -> None:
    before = daemon.store.count("jobs")
    status, out = call(daemon, "POST", "/api/v1/jobs", "user", {**job("fine"), **patch})
    assert status == 400, out
    assert out["field"] == field, out
    assert out["error"].startswith(field + ":"), out
    assert daemon.store.count("jobs") == before


def test_cli_with_a_read_token_lists_but_cannot_submit(
    daemon: Allocator, tmp_path, monkeypatch
) -> None:
    from flowcon.cli import main

    for var in ("FLOWCON_ALLOCATOR_CONFIG", "FLOWCON_ALLOCATOR_TOKEN", "FLOWCON_ALLOCATOR_URL"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("FLOWCON_TOKEN", TOKENS["read"])  # the short variable, as before
    spec = tmp_path / "j.yaml"
    spec.write_text(json.dumps(job("clijob")))
    res = CliRunner().invoke(main, ["jobs", "--url", daemon.url])
    assert res.exit_code == 0, res.output
    assert "keep" in res.output, res.output
    res = CliRunner().invoke(main, ["submit", str(spec), "--url", daemon.url])
    assert res.exit_code != 0, res.output
    assert "user or operator token" in res.output, res.output
    assert daemon.store.get_job("clijob") is None
    res = CliRunner().invoke(main, ["cancel", "keep", "--url", daemon.url])
    assert res.exit_code != 0, res.output
    assert "user or operator token" in res.output, res.output
    assert daemon.store.get_job("keep").state != "cancelled"  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "path",
    ["/etc", "/var/run", "/run", "/root", "/var/lib/docker", "/proc", "/dev", "/boot", "/home"],
)
def test_a_user_token_mounts_no_host_path(daemon: Allocator, path: str) -> None:
    """Every one of these was accepted from a user token before: any user was root on
    every node. Without executor.bind_roots a job gets named volumes only (dry run too)."""
    before = daemon.store.count("jobs")
    spec = job("hostile", volumes=["cache:/cache", f"{path}:/host"])
    for url in ("/api/v1/jobs", "/api/v1/jobs?dry_run=true"):
        status, out = call(daemon, "POST", url, "user", spec)
        assert status == 400, out
        assert out["field"] == "volumes[1].source", out
        assert out["error"].startswith(f"volumes[1].source: {path!r} is not allowed: "), out
    assert daemon.store.count("jobs") == before
