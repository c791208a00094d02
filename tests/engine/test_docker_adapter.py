"""The engine adapter without an engine: cgroup files, the log stream's framing, the
kept-alive HTTP transport (a tiny server on a Unix socket), docker-stats figures."""

from __future__ import annotations

import io
import json
import socketserver
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest

from flowcon.engine.cgroups import (
    CgroupFormatError,
    CgroupReader,
    candidate_paths,
    expand_slice,
    parse_cpu_stat_usage,
    parse_cpuacct_usage,
    parse_memory_bytes,
    parse_proc_cgroup,
)
from flowcon.engine.docker_engine import (
    ContainerGone,
    DockerEngine,
    EngineError,
    EngineUnavailable,
    _since_param,
    docker_stats_figures,
)
from flowcon.engine.logs import demux_frames

CID = "ab" * 32

# ----- cgroup files -------------------------------------------------------------------


def test_parse_cgroup_files() -> None:
    assert parse_cpuacct_usage("123456789012\n") == 123456789012
    text = "usage_usec 2500\nuser_usec 2000\nsystem_usec 500\nnr_periods 0\n"
    assert parse_cpu_stat_usage(text) == 2_500_000
    assert parse_memory_bytes("4096\n") == 4096
    for bad in ("", "-5", "12 34", "nan", "1e9", "x" * 5000):
        with pytest.raises(CgroupFormatError):
            parse_cpuacct_usage(bad)
        with pytest.raises(CgroupFormatError):
            parse_memory_bytes(bad)
    for bad in ("user_usec 5\n", "usage_usec lots\n", ""):
        with pytest.raises(CgroupFormatError):
            parse_cpu_stat_usage(bad)


def test_parse_proc_cgroup_and_paths() -> None:
    v1 = "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n1:name=systemd:/docker/abc\n0::/\n"
    groups = parse_proc_cgroup(v1 + "garbage line\n")
    assert groups["cpuacct"] == groups["cpu"] == "/docker/abc"
    assert groups[""] == "/"
    assert parse_proc_cgroup("0::/system.slice/docker-x.scope\n")[""].endswith("x.scope")
    assert expand_slice("system.slice") == "system.slice"
    assert expand_slice("user-1000.slice") == "user.slice/user-1000.slice"
    assert expand_slice("-.slice") == ""
    assert candidate_paths(CID) == [f"/docker/{CID}", f"/system.slice/docker-{CID}.scope"]
    assert candidate_paths(CID, "/custom")[0] == f"/custom/{CID}"
    assert candidate_paths(CID, "my-jobs.slice")[1] == f"/my.slice/my-jobs.slice/docker-{CID}.scope"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


@pytest.mark.parametrize("cpu_dir", ["cpuacct", "cpu,cpuacct"])
def test_reader_v1_layouts(tmp_path: Path, cpu_dir: str) -> None:
    _write(tmp_path / cpu_dir / "docker" / CID / "cpuacct.usage", "5000000000\n")
    _write(tmp_path / "memory" / "docker" / CID / "memory.usage_in_bytes", "1048576\n")
    reader = CgroupReader(tmp_path)
    files = reader.locate(CID)
    assert files is not None
    assert not files.cpu_v2
    assert reader.read(files) == (5_000_000_000, 1_048_576)
    assert reader.locate("cd" * 32) is None  # another container: nothing to find


def test_reader_v2_systemd(tmp_path: Path) -> None:
    _write(tmp_path / "cgroup.controllers", "cpu memory io\n")
    scope = tmp_path / "system.slice" / f"docker-{CID}.scope"
    _write(scope / "cpu.stat", "usage_usec 1500\nuser_usec 1000\n")
    _write(scope / "memory.current", "2048\n")
    reader = CgroupReader(tmp_path)
    files = reader.locate(CID)
    assert files is not None
    assert files.cpu_v2
    assert reader.read(files) == (1_500_000, 2048)


def test_engine_falls_back_when_files_are_bad_or_gone(tmp_path: Path) -> None:
    cpu = tmp_path / "cpuacct" / "docker" / CID / "cpuacct.usage"
    _write(cpu, "100\n")
    eng = DockerEngine("unix:///nonexistent.sock", cgroup_root=str(tmp_path))
    sample = eng.cgroup_usage(CID)
    assert sample is not None
    assert sample.cpu_ns == 100
    assert sample.mem_bytes is None
    cpu.write_text("garbage\n")
    assert eng.cgroup_usage(CID) is None  # logged; the caller asks the engine instead
    cpu.write_text("200\n")
    assert eng.cgroup_usage(CID).cpu_ns == 200  # type: ignore[union-attr]  # found again
    cpu.unlink()
    assert eng.cgroup_usage(CID) is None
    assert DockerEngine("unix:///x.sock", cgroup_root=None).cgroup_usage(CID) is None
    missing_root = DockerEngine("unix:///x.sock", cgroup_root=str(tmp_path / "none"))
    assert missing_root.cgroup_usage(CID) is None


def test_engine_reads_the_containers_pids_for_the_gpu_match(tmp_path: Path) -> None:
    """cgroup.procs beside the CPU counter (v1 cpuacct): the PIDs NVML's processes are
    matched to; None where the cgroup is not reachable."""
    group = tmp_path / "cpuacct" / "docker" / CID
    _write(group / "cpuacct.usage", "100\n")
    _write(group / "cgroup.procs", "4242\n4243\n")
    eng = DockerEngine("unix:///nonexistent.sock", cgroup_root=str(tmp_path))
    assert eng.cgroup_pids(CID) == {4242, 4243}
    assert eng.cgroup_usage(CID) is not None  # the same files, found once
    (group / "cgroup.procs").unlink()
    assert eng.cgroup_pids(CID) is None
    assert eng.cgroup_pids("0" * 64) is None
    assert DockerEngine("unix:///x.sock", cgroup_root=None).cgroup_pids(CID) is None


# ----- log stream framing ---------------------------------------------------------------


def _mux(*payloads: bytes, stream: int = 1) -> bytes:
    return b"".join(bytes([stream, 0, 0, 0]) + len(p).to_bytes(4, "big") + p for p in payloads)


class Trickle:
    """A body that arrives ``step`` bytes per read, as a slow socket would deliver it."""

    def __init__(self, data: bytes, step: int) -> None:
        self.buf = io.BytesIO(data)
        self.step = step

    def read(self, n: int) -> bytes:
        return self.buf.read(min(n, self.step))


@pytest.mark.parametrize("step", [1, 3, 7, 65536])
def test_demux_frames_whatever_the_read_sizes(step: int) -> None:
    frames = [b"2026-11-21T19:18:06Z one\n", b"", b"x" * 70000, b"2026-11-21T19:18:07Z two\n"]
    body = _mux(frames[0]) + _mux(frames[1], stream=2) + _mux(frames[2]) + _mux(frames[3])
    got = list(demux_frames(Trickle(body, step).read, chunk=65536))
    assert [f for f in got if f] == [f for f in frames if f]


def test_demux_tty_raw_stream_and_truncation() -> None:
    raw = b"2026-11-21T19:18:06Z one\n2026-11-21T19:18:07Z two\n"
    assert b"".join(demux_frames(io.BytesIO(raw).read, chunk=10)) == raw
    cut = _mux(b"whole\n") + _mux(b"cut off")[:-3]
    assert list(demux_frames(io.BytesIO(cut).read)) == [b"whole\n"]
    assert list(demux_frames(io.BytesIO(b"").read)) == []


def test_demux_giant_frame_is_passed_in_pieces() -> None:
    body = _mux(b"y" * 5000) + _mux(b"ok\n")
    pieces = list(demux_frames(io.BytesIO(body).read, chunk=1024, max_piece=2048))
    assert b"".join(pieces) == b"y" * 5000 + b"ok\n"
    assert max(len(p) for p in pieces) <= 2048
    assert pieces[-1] == b"ok\n"


def test_since_is_exact_to_the_nanosecond() -> None:
    assert _since_param(1_700_000_000_000_000_001) == "1700000000.000000001"
    assert _since_param(1_700_000_000_123_456_789) == "1700000000.123456789"


def test_docker_stats_figures() -> None:
    data = {
        "cpu_stats": {
            "cpu_usage": {"total_usage": 3_000_000_000},
            "system_cpu_usage": 20_000_000_000,
            "online_cpus": 2,
        },
        "precpu_stats": {"cpu_usage": {"total_usage": 2_000_000_000}, "system_cpu_usage": 18e9},
        "memory_stats": {"usage": 10_000, "limit": 1 << 30, "stats": {"total_inactive_file": 4000}},
        "networks": {"eth0": {"rx_bytes": 5, "tx_bytes": 7}},
    }
    live = docker_stats_figures(data)
    assert live.cpu_percent == pytest.approx(100.0)  # 1 s of CPU in 2 s of 2 CPUs: one CPU
    assert (live.mem_bytes, live.mem_limit, live.net_rx, live.net_tx) == (6000, 1 << 30, 5, 7)
    empty = docker_stats_figures({})
    assert empty.cpu_percent is None
    assert empty.mem_bytes == 0  # a stopped container


# ----- the kept-alive transport against a server on a Unix socket ----------------------


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive

    def do_GET(self) -> None:
        srv = self.server
        srv.paths.append(self.path)  # type: ignore[attr-defined]
        if self.path == "/version":  # bookworm's engine
            self._send(200, b'{"Version":"20.10.24","ApiVersion":"1.41","MinAPIVersion":"1.12"}')
        elif "/containers/gone/" in self.path:
            self._send(404, b'{"message":"No such container: gone"}')
        elif "/containers/big/logs" in self.path:
            self._send(200, _mux(b"2026-11-21T19:18:06.5Z " + b"z" * 1000 + b"\n") * 200)
        elif "/logs" in self.path:
            self._send(200, _mux(b'2026-11-21T19:18:06.5Z {"loss": 1}\n') * 3)
        elif self.path.startswith("/v1.41/containers/json?filters="):
            self._send(200, json.dumps([{"Id": "c1", "Names": ["/one"], "Labels": {}}]).encode())
        elif "/garbage" in self.path:
            self._send(200, b"<html>not json")
        else:
            self._send(500, b'{"message":"boom"}')
        if srv.close_after:  # type: ignore[attr-defined]
            self.close_connection = True

    def do_POST(self) -> None:
        self.server.paths.append(self.path)  # type: ignore[attr-defined]
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if body:
            self.server.bodies.append(json.loads(body))  # type: ignore[attr-defined]
        self._send(204 if "/restart" in self.path else 200, b"")

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str) -> None:
        super().__init__(path, _Handler)
        self.paths: list[str] = []
        self.bodies: list[object] = []
        self.connections = 0
        self.close_after = False

    def handle_error(self, request, client_address) -> None:
        pass  # a client dropping a half-read reply resets the connection: expected here

    def process_request(self, request, client_address) -> None:
        self.connections += 1
        super().process_request(request, client_address)


@pytest.fixture
def fake_engine_socket(tmp_path: Path) -> Iterator[_Server]:
    server = _Server(str(tmp_path / "engine.sock"))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_transport_keeps_connections_alive(fake_engine_socket: _Server) -> None:
    eng = DockerEngine(f"unix://{fake_engine_socket.server_address}", cgroup_root=None)
    for _ in range(5):
        assert [c.name for c in eng.list_running()] == ["one"]
        frames = list(eng.log_frames("c1", 1_700_000_000_000_000_001, None))
        assert len(frames) == 3
    eng.update_cpu("c1", {"NanoCpus": 500_000_000})
    assert fake_engine_socket.bodies == [{"NanoCpus": 500_000_000}]
    assert fake_engine_socket.connections == 1  # 12 requests, one connection
    assert fake_engine_socket.paths[0] == "/version"  # asked once, first
    assert fake_engine_socket.paths.count("/version") == 1
    assert "since=1700000000.000000001" in fake_engine_socket.paths[2]
    with pytest.raises(ContainerGone):
        eng.inspect("gone")
    with pytest.raises(ContainerGone):
        list(eng.log_frames("gone", None, 10))
    with pytest.raises(EngineError, match="500 boom"):
        eng.inspect("other")
    with pytest.raises(EngineError, match="no JSON"):
        eng._request("GET", "/garbage", "garbage")
    assert fake_engine_socket.connections == 1  # errors with a body do not cost a connection
    # A log stream abandoned half-way is not put back (its rest would be read as a reply).
    next(iter(eng.log_frames("big", None, 10)))
    eng.list_running()
    assert fake_engine_socket.connections == 2
    eng.close()


def test_restart_asks_the_engine_with_the_stop_timeout(fake_engine_socket: _Server) -> None:
    """The GPU-share restart: POST /containers/{id}/restart?t=N, no body."""
    eng = DockerEngine(f"unix://{fake_engine_socket.server_address}", cgroup_root=None)
    eng.restart("c1", stop_timeout_s=45)
    assert fake_engine_socket.paths[-1].endswith("/containers/c1/restart?t=45")
    assert fake_engine_socket.bodies == []
    eng.close()


def test_transport_reconnects_after_the_engine_closed(fake_engine_socket: _Server) -> None:
    fake_engine_socket.close_after = True  # the engine closes every connection (a restart)
    eng = DockerEngine(f"unix://{fake_engine_socket.server_address}", cgroup_root=None)
    for _ in range(3):
        assert len(eng.list_running()) == 1
    # each list on a new connection, and the API version asked again on each: the engine
    # that answers after a reconnect may be another (upgraded) one
    assert fake_engine_socket.paths.count("/version") == 3
    assert fake_engine_socket.connections == 6


def test_transport_engine_unavailable(tmp_path: Path) -> None:
    eng = DockerEngine(f"unix://{tmp_path / 'missing.sock'}", cgroup_root=None)
    with pytest.raises(EngineUnavailable):
        eng.list_running()
    with pytest.raises(EngineUnavailable):
        list(eng.log_frames("c1", None, 10))
    assert eng.ping() is False
