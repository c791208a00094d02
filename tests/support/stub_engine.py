"""A stub Docker engine on a Unix socket (http.server over AF_UNIX, in a thread).

It answers like a real engine of a chosen API range: ``GET /version`` (unversioned)
says the range, and a versioned path outside it gets the engine's own refusal, e.g.
Engine 29's ``400 client version 1.41 is too old. Minimum supported API version is
1.44, ...``. Behind the version check it serves the few calls the agent makes (list,
inspect, update, logs, stats, info) and Swarm's ``/services/{id}`` from plain dicts,
and records every path and update body. Use::

    with StubEngine(tmp_path / "engine.sock", ENGINE_29) as stub:
        stub.add("c1", "one", {"flowcon.enable": "true"})
        DockerEngine(stub.url, cgroup_root=None).list_running()
"""

from __future__ import annotations

import json
import re
import socketserver
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass(frozen=True)
class Release:
    version: str
    api: str  # newest
    min_api: str  # oldest

    def answer(self) -> dict[str, str]:
        return {"Version": self.version, "ApiVersion": self.api, "MinAPIVersion": self.min_api}


ENGINE_29 = Release("29.0.0", "1.52", "1.44")  # refuses API below 1.44
BOOKWORM = Release("20.10.24+dfsg1", "1.41", "1.12")
TRIXIE = Release("26.1.5+dfsg1", "1.45", "1.24")
TOO_OLD = Release("19.03.15", "1.40", "1.12")  # older than FlowCon's oldest (1.41)
TOO_NEW = Release("99.0.0", "1.60", "1.50")  # refuses every version FlowCon speaks


def _v(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


@dataclass
class StubContainer:
    name: str
    labels: dict[str, str]
    nano_cpus: int = 0
    cpu_ns: int = 0
    lines: list[str] = field(default_factory=list)


_VERSIONED = re.compile(r"^/v(\d+\.\d+)(/.*)$")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the engine
    server: StubEngine

    def do_GET(self) -> None:
        self._serve("GET", b"")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self._serve("POST", self.rfile.read(length))

    def _serve(self, method: str, body: bytes) -> None:
        stub = self.server
        stub.paths.append(self.path)
        if self.path == "/version":
            return self._json(200, stub.release.answer())
        if self.path == "/_ping":
            return self._send(200, b"OK")
        m = _VERSIONED.match(self.path)
        if m is None:
            return self._json(404, {"message": "page not found"})
        version, rest = m.group(1), m.group(2)
        if _v(version) < _v(stub.release.min_api):
            msg = (
                f"client version {version} is too old. Minimum supported API version is "
                f"{stub.release.min_api}, please upgrade your client to a newer version"
            )
            return self._json(400, {"message": msg})
        if _v(version) > _v(stub.release.api):
            msg = (
                f"client version {version} is too new. Maximum supported API version is "
                f"{stub.release.api}"
            )
            return self._json(400, {"message": msg})
        stub.versions.add(version)
        with stub.lock:
            code, answer = stub.route(method, rest, body)
        if isinstance(answer, bytes):
            return self._send(code, answer)
        return self._json(code, answer)

    def _json(self, code: int, data: Any) -> None:
        self._send(code, json.dumps(data).encode())

    def _send(self, code: int, body: bytes) -> None:
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _frame(line: str) -> bytes:
    """One stdout frame of the engine's multiplexed log stream."""
    data = line.encode() + b"\n"
    return bytes([1, 0, 0, 0]) + len(data).to_bytes(4, "big") + data


class StubEngine(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: Path, release: Release) -> None:
        path.unlink(missing_ok=True)
        super().__init__(str(path), _Handler)
        self.url = f"unix://{path}"
        self.release = release
        self.lock = threading.Lock()
        self.paths: list[str] = []
        self.versions: set[str] = set()  # API versions it served
        self.updates: list[tuple[str, dict[str, Any]]] = []
        self.containers: dict[str, StubContainer] = {}
        self.services: dict[str, dict[str, str]] = {}  # service id -> Spec.Labels
        self.ncpu = 4
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    def __enter__(self) -> StubEngine:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # a client dropping a connection mid-reply: expected

    def add(self, cid: str, name: str, labels: dict[str, str], **kw: Any) -> StubContainer:
        with self.lock:
            self.containers[cid] = StubContainer(name, labels, **kw)
            return self.containers[cid]

    def emit(self, cid: str, step: int, loss: float, cpu_s: float = 0.5) -> None:
        """A metric line now, after ``cpu_s`` seconds of the container's CPU."""
        ts = time.time()
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ts)) + f".{int(ts % 1 * 1e9):09d}Z"
        with self.lock:
            c = self.containers[cid]
            c.lines.append(f'{stamp} {{"step": {step}, "loss": {loss}}}')
            c.cpu_ns += int(cpu_s * 1e9)

    # ----- the API behind the version check ------------------------------------------

    def route(self, method: str, rest: str, body: bytes) -> tuple[int, Any]:
        parts = urlsplit(rest)
        segs = parts.path.strip("/").split("/")
        if parts.path == "/info":
            return 200, {"NCPU": self.ncpu}
        if parts.path == "/containers/json":
            return 200, [
                {"Id": cid, "Names": [f"/{c.name}"], "Labels": c.labels, "State": "running"}
                for cid, c in self.containers.items()
            ]
        if segs[0] == "services" and len(segs) == 2:
            if segs[1] not in self.services:
                return 404, {"message": f"service {segs[1]} not found"}
            return 200, {"ID": segs[1], "Spec": {"Labels": self.services[segs[1]]}}
        if segs[0] == "containers" and len(segs) == 3:
            c = self.containers.get(segs[1])
            if c is None:
                return 404, {"message": f"No such container: {segs[1]}"}
            return self._container(method, segs[1], c, segs[2], parse_qs(parts.query), body)
        return 404, {"message": "page not found"}

    def _container(
        self,
        method: str,
        cid: str,
        c: StubContainer,
        what: str,
        query: dict[str, list[str]],
        body: bytes,
    ) -> tuple[int, Any]:
        if what == "json":
            return 200, {
                "Id": cid,
                "Name": f"/{c.name}",
                "State": {"Running": True, "Pid": 0},
                "Config": {"Labels": c.labels},
                "HostConfig": {"NanoCpus": c.nano_cpus, "CgroupParent": ""},
            }
        if what == "update" and method == "POST":
            data = json.loads(body)
            self.updates.append((cid, data))
            c.nano_cpus = int(data.get("NanoCpus", c.nano_cpus))
            return 200, {"Warnings": []}
        if what == "logs":
            lines = c.lines
            if "tail" in query:
                lines = lines[-int(query["tail"][0]) :]
            return 200, b"".join(_frame(line) for line in lines)
        if what == "stats":
            return 200, {
                "cpu_stats": {"cpu_usage": {"total_usage": c.cpu_ns}},
                "memory_stats": {"usage": 1 << 20},
            }
        return 404, {"message": "page not found"}
