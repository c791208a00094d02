"""A node engine over mutual TLS (a stand-in engine on a loopback https port, with
openssl-made certificates): the executor's client reaches it only with the right
certificates. Marked docker: it opens a Docker SDK client."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from flowcon.executor.node_hosts import parse_node_hosts

pytestmark = pytest.mark.docker


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def _pki(d: Path) -> dict[str, str]:
    """A CA, an engine certificate for 127.0.0.1 and a client certificate it signed."""
    p = {n: str(d / f"{n}.pem") for n in ("ca", "ca-key", "srv", "srv-key", "cli", "cli-key")}
    _openssl(
        "req",
        "-x509",
        "-newkey",
        "rsa:2048",
        "-nodes",
        "-days",
        "1",
        "-subj",
        "/CN=ca",
        "-keyout",
        p["ca-key"],
        "-out",
        p["ca"],
    )
    (d / "san.cnf").write_text("subjectAltName=IP:127.0.0.1\n")
    for who, cn in (("srv", "engine"), ("cli", "flowcon")):
        csr = str(d / f"{who}.csr")
        _openssl(
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-subj",
            f"/CN={cn}",
            "-keyout",
            p[f"{who}-key"],
            "-out",
            csr,
        )
        _openssl(
            "x509",
            "-req",
            "-in",
            csr,
            "-CA",
            p["ca"],
            "-CAkey",
            p["ca-key"],
            "-CAcreateserial",
            "-days",
            "1",
            "-out",
            p[who],
            *(["-extfile", str(d / "san.cnf")] if who == "srv" else []),
        )
    return p


class _Engine(BaseHTTPRequestHandler):
    """Enough of the Engine API for a client to connect: /version."""

    def do_GET(self) -> None:
        body = json.dumps({"ApiVersion": "1.41", "Version": "20.10.24"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def _tls_engine(p: dict[str, str]) -> ThreadingHTTPServer:
    """An engine endpoint as ``dockerd --tlsverify`` serves it: client certificates of
    the CA only."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(p["srv"], p["srv-key"])
    ctx.load_verify_locations(p["ca"])
    ctx.verify_mode = ssl.CERT_REQUIRED
    server.socket = ctx.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_a_node_engine_is_reached_over_mutual_tls_only(tmp_path) -> None:
    import docker

    from flowcon.executor.backends.swarm import connect_node

    p = _pki(tmp_path)
    server = _tls_engine(p)
    url = f"tcp://127.0.0.1:{server.server_address[1]}"
    try:
        good = {"ca_cert": p["ca"], "client_cert": p["cli"], "client_key": p["cli-key"]}
        client = connect_node(parse_node_hosts({"node2": {"host": url, "tls": good}})["node2"])
        assert client.version()["ApiVersion"] == "1.41"
        assert client.api.base_url.startswith("https://127.0.0.1:")
        client.close()
        # a client whose certificate the engine's CA did not sign is refused by the engine
        other = tmp_path / "other"
        other.mkdir()
        q = _pki(other)
        stranger = {"ca_cert": p["ca"], "client_cert": q["cli"], "client_key": q["cli-key"]}
        with pytest.raises(docker.errors.DockerException):
            connect_node(parse_node_hosts({"n": {"host": url, "tls": stranger}})["n"])
        # an engine whose certificate our CA did not sign is refused by the client
        wrong_ca = {"ca_cert": q["ca"], "client_cert": p["cli"], "client_key": p["cli-key"]}
        with pytest.raises(docker.errors.DockerException):
            connect_node(parse_node_hosts({"n": {"host": url, "tls": wrong_ca}})["n"])
    finally:
        server.shutdown()
        server.server_close()
