"""Agent pieces without an engine: log frames, state file, config, allocator report."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from flowcon.agent.config import ConfigError, from_mapping, load
from flowcon.agent.reporter import AllocatorReporter
from flowcon.agent.state_file import AgentState, ContainerRecord, StateStore
from flowcon.engine.logs import LineAssembler, parse_ts, read_lines

TS = b"2026-11-21T19:18:06.591384983Z "


def test_parse_ts() -> None:
    ns, used = parse_ts(TS + b"hello")  # type: ignore[misc]
    assert used == len(TS)
    assert ns % 1_000_000_000 == 591384983
    assert parse_ts(b"2026-11-21T19:18:06Z x")[0] % 1_000_000_000 == 0  # type: ignore[index]
    assert parse_ts(b"not a timestamp") is None


def test_read_lines_joins_engine_partials() -> None:
    """json-file splits a long line in 16 KiB frames, each with the same timestamp."""
    body = b'{"loss": 1.5, "pad": "' + b"a" * 20000 + b'"}'
    frames = [TS + body[:16384], TS + body[16384:] + b"\n", TS + b'{"loss": 2}\n']
    lines = list(read_lines(frames, 64 * 1024))
    assert [json.loads(ln.text)["loss"] for ln in lines] == [1.5, 2]  # type: ignore[arg-type]


def test_read_lines_tty_chunks_and_since() -> None:
    t1 = b"2026-11-21T19:18:06.000000001Z "
    t2 = b"2026-11-21T19:18:07.5Z "
    frames = [t1 + b"one\n" + t2 + b"tw", b"o\n"]
    lines = list(read_lines(frames, 1024))
    assert [ln.text for ln in lines] == ["one", "two"]
    after = lines[0].ts_ns
    assert [ln.text for ln in read_lines(frames, 1024, after_ns=after)] == ["two"]


def test_read_lines_drops_huge_line_and_partial_tail() -> None:
    frames = [TS + b"x" * 16384 for _ in range(640)] + [TS + b"\n", TS + b"ok\n", TS + b"half"]
    lines = list(read_lines(frames, 64 * 1024))
    assert lines[0].text is None
    assert lines[0].size == 640 * 16384
    assert [ln.text for ln in lines[1:]] == ["ok"]


def test_huge_line_is_dropped_with_bounded_memory() -> None:
    asm = LineAssembler(64 * 1024)
    chunk = b"x" * 16 * 1024
    for _ in range(640):  # 10 MiB in 16 KiB pieces
        asm.feed(chunk)
        assert sum(len(p) for p in asm._parts) <= 64 * 1024
    line, size = asm.end_line()
    assert line is None
    assert size == 10 * 1024 * 1024
    asm.feed(b'{"loss": 1}')
    assert asm.end_line() == (b'{"loss": 1}', 11)  # the next line is fine


def test_state_round_trip(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "sub" / "state.json")
    assert store.load().containers == {}
    state = AgentState(itval=40.0, rounds=7)
    state.containers["abc"] = ContainerRecord(
        id="abc",
        name="job",
        managed=True,
        list="CL",
        limit=0.25,
        applied_cpus=0.5,
        original={"nano_cpus": 0, "cpu_quota": 0, "cpu_period": 0, "cpu_shares": 512},
        growth={"last_point": [1.0, 2.0], "reference": 3.0, "intervals": 3, "g": 0.01},
    )
    store.save(state)
    back = store.load()
    assert back.itval == 40.0
    assert back.rounds == 7
    assert back.containers["abc"] == state.containers["abc"]
    assert [p.name for p in store.path.parent.iterdir()] == ["state.json"]  # no temp left


def test_state_round_trip_of_control_fields_and_old_records(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.json")
    state = AgentState()
    state.containers["abc"] = ContainerRecord(
        id="abc",
        name="job",
        managed=True,
        applied_cpus=1.0,
        applied_mode="cpuset",
        applied_shares=1024,
        applied_cpuset="0",
        applied_cap=0.5,
        threads=2,
        original={
            "nano_cpus": 0,
            "cpu_quota": 0,
            "cpu_period": 0,
            "cpu_shares": 0,
            "cpuset_cpus": "0-1",
        },
    )
    store.save(state)
    assert store.load().containers["abc"] == state.containers["abc"]
    # a file written before control modes: no mode, no cpuset, no threads
    raw = json.loads(store.path.read_text())
    rec = raw["containers"]["abc"]
    for key in ("applied_mode", "applied_shares", "applied_cpuset", "applied_cap", "threads"):
        del rec[key]
    del rec["original"]["cpuset_cpus"]
    store.path.write_text(json.dumps(raw))
    old = store.load().containers["abc"]
    assert (old.applied_mode, old.applied_cpuset, old.threads) == (None, None, None)
    assert old.original == {"nano_cpus": 0, "cpu_quota": 0, "cpu_period": 0, "cpu_shares": 0}


@pytest.mark.parametrize(
    "text", ["{not json", '{"version": 99}', '{"version": 1, "containers": {"a": 3}}']
)
def test_corrupt_state_is_kept_aside(tmp_path: Path, text: str, caplog) -> None:
    path = tmp_path / "state.json"
    path.write_text(text)
    state = StateStore(path).load()
    assert state.containers == {}
    assert not path.exists()
    aside = list(tmp_path.glob("state.json.corrupt-*"))
    assert len(aside) == 1
    assert aside[0].read_text() == text
    assert "corrupt" in caplog.text


def test_config_defaults_and_errors(tmp_path: Path) -> None:
    cfg = load(None)
    assert (cfg.alpha, cfg.itval, cfg.beta) == (0.05, 20.0, 2.0)
    good = tmp_path / "c.yaml"
    good.write_text("alpha: 0.1\nitval: 2\nallocator: {url: 'http://x:1', token: t}\n")
    assert load(good).allocator.token == "t"
    for text, needle in [
        ("alpha: [1", "not valid YAML"),
        ("alpah: 0.1", "unknown key"),
        ("itval: -3", "itval: -3 is not allowed: seconds > 0"),
        ("itval: 30\nitval_max: 10", "itval_max"),
        ("allocator: {url: ftp://x}", "allocator.url"),
        ("- 1\n- 2", "mapping"),
        ("match_labels: [a]", "match_labels"),
    ]:
        bad = tmp_path / "bad.yaml"
        bad.write_text(text)
        with pytest.raises(ConfigError, match=needle):
            load(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    assert from_mapping({"match_labels": {"flowcon.test": 5}}).match_labels == {"flowcon.test": "5"}


def test_allocator_report_contract() -> None:
    got: list[tuple[str, str | None, dict[str, Any]]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers["Content-Length"]))
            got.append((self.path, self.headers.get("Authorization"), json.loads(body)))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}"
        rep = AllocatorReporter(url, "s3cret", "node-1", timeout=2)
        view = {
            "container_id": "abc",
            "name": "w",
            "job": "resnet",
            "step": 40,
            "iterations_per_second": 2.5,
            "metric": "loss",
            "value": 0.3,
            "ts": 1.0,
            "step_ts": 1.0,
            "g": 0.5,
        }
        assert rep.send([view])
        path, auth, body = got[0]
        assert path == "/api/v1/measurements"
        assert auth == "Bearer s3cret"
        assert body["node"] == "node-1"
        assert body["measurements"] == [{k: v for k, v in view.items() if k != "g"}]
        # No new step line since: the same rate must not be reported as a new measurement.
        assert rep.send([view])
        assert got[1][2]["measurements"][0]["iterations_per_second"] is None
        assert got[1][2]["measurements"][0]["step"] == 40
        assert rep.send([{**view, "step": 50, "step_ts": 5.0, "iterations_per_second": 2.0}])
        assert got[2][2]["measurements"][0]["iterations_per_second"] == 2.0
    finally:
        server.shutdown()
    dead = AllocatorReporter("http://127.0.0.1:9", None, "n", timeout=0.5)
    assert dead.send([]) is False
    assert dead.failures == 1  # logged, not raised


def test_status_table_and_json(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from flowcon.agent.cli import status

    store = StateStore(tmp_path / "s.json")
    state = AgentState(itval=20.0, rounds=3, node="n1", host_cpus=2)
    state.containers["abcdef1234567890"] = ContainerRecord(
        id="abcdef1234567890",
        name="trainer",
        managed=True,
        list="CL",
        limit=0.25,
        applied_cpus=0.5,
        view={"g": 0.01, "cpu_share": 0.2, "metric": "loss", "value": 0.42, "step": 7},
    )
    store.save(state)
    out = CliRunner().invoke(status, ["--state", str(store.path), "--no-engine"])
    assert out.exit_code == 0, out.output
    assert "trainer" in out.output
    assert "CL" in out.output
    assert "loss=0.42" in out.output
    assert "40.0" in out.output  # CPU %: 0.2 of 2 CPUs
    js = CliRunner().invoke(status, ["--state", str(store.path), "--json", "--no-engine"])
    assert json.loads(js.output)["containers"][0]["value"] == 0.42
    # The engine does not answer: the state file's figures, with a note saying so.
    down = {"DOCKER_HOST": f"unix://{tmp_path / 'no-engine.sock'}"}
    out = CliRunner().invoke(status, ["--state", str(store.path)], env=down)
    assert out.exit_code == 0, out.output
    assert "engine not answering" in out.output
    assert "40.0" in out.output
    js = CliRunner().invoke(status, ["--state", str(store.path), "--json"], env=down)
    data = json.loads(js.output)
    assert data["engine"]["answered"] is False
    assert data["containers"][0]["live"] is None
    missing = CliRunner().invoke(status, ["--state", str(tmp_path / "none.json")])
    assert missing.exit_code != 0
    assert "no agent state" in missing.output


def test_status_shows_gpu_use_from_the_state_file(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from flowcon.agent.cli import status

    store = StateStore(tmp_path / "s.json")
    state = AgentState(itval=20.0, rounds=3, node="n1", host_cpus=2)
    gpus = [
        {"gpu": 0, "uuid": "GPU-a", "util": 0.5, "mem_bytes": 1 << 30},
        {"gpu": 2, "uuid": "GPU-c", "util": 0.25, "mem_bytes": 1 << 30},
    ]
    procs = [{"pid": 7, "gpu": 0, "uuid": "GPU-a", "mem_bytes": 1 << 30, "sm_util": 0.5}]
    for cid, name, view in (
        ("a" * 16, "ongpu", {"gpus": gpus, "gpu_mem_bytes": 2 << 30, "gpu_processes": procs}),
        ("b" * 16, "oncpu", {"gpus": []}),
        ("c" * 16, "shared", {"gpus": [{**gpus[0], "util": None}], "gpu_mem_bytes": 1 << 30}),
    ):
        state.containers[cid] = ContainerRecord(id=cid, name=name, managed=True, view=view)
    store.save(state)
    out = CliRunner().invoke(status, ["--state", str(store.path), "--no-engine"])
    assert out.exit_code == 0, out.output
    assert "GPU %" in out.output
    assert "GPU MEM" in out.output
    rows = {line.split("│")[2].strip(): line for line in out.output.splitlines() if "│" in line}
    assert "75.0 (GPU 0,2)" in rows["ongpu"]
    assert "2.0GiB" in rows["ongpu"]
    assert "? (GPU 0)" in rows["shared"]  # two tenants, no per-process figure
    js = CliRunner().invoke(status, ["--state", str(store.path), "--json", "--no-engine"])
    views = json.loads(js.output)["containers"]
    assert [v["gpu_processes"][0]["pid"] for v in views if v.get("gpu_processes")] == [7]


def test_prometheus_metrics() -> None:
    from prometheus_client import generate_latest

    from flowcon.agent.exporter import Exporter

    exp = Exporter()
    view = {"container_id": "abc", "name": "w", "cpus": 0.5, "limit": 0.25, "g": 0.1}
    exp.update([view], 40.0)
    text = generate_latest(exp.registry).decode()
    labels = 'id="/docker/abc",job="",list="none",name="w"'
    assert f"flowcon_container_cpu_limit_cpus{{{labels}}} 0.5" in text
    assert f"flowcon_container_growth_efficiency{{{labels}}} 0.1" in text
    assert "flowcon_agent_rounds_total 1.0" in text
    exp.update([], 40.0)  # the container left: its series go away
    assert 'name="w"' not in generate_latest(exp.registry).decode()
