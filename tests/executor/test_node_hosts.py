"""Node engines only over a socket, ssh or mutual TLS (flowcon/executor/node_hosts.py): a
``tcp://`` without TLS is refused at config load and at start, naming the entry."""

from __future__ import annotations

import json
import ssl
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from flowcon.allocator.config import ConfigError, load_config
from flowcon.executor.factory import make_backend
from flowcon.executor.node_hosts import NodeTls, parse_node_hosts

TLS = {
    "ca_cert": "/etc/flowcon/ca.pem",
    "client_cert": "/etc/flowcon/c.pem",
    "client_key": "/etc/flowcon/k.pem",
}


def _load(tmp_path, executor: str):
    p = tmp_path / "flowcon.yaml"
    p.write_text("executor:\n" + executor)
    return load_config(p)


@pytest.mark.parametrize(
    "url",
    ["tcp://10.0.0.2:2375", "http://10.0.0.2:2375", "tcp://10.0.0.2:2376", "https://10.0.0.2:2376"],
)
def test_plain_tcp_is_refused_naming_the_entry(tmp_path, url) -> None:
    with pytest.raises(ConfigError, match=r"executor\.node_hosts\.node2: .* without TLS"):
        _load(tmp_path, f"  backend: swarm\n  node_hosts: {{node2: '{url}'}}\n")
    with pytest.raises(ValueError, match=r"executor\.node_hosts\.node2: .* without TLS"):
        make_backend({"backend": "swarm", "node_hosts": {"node2": url}}, client=object())  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("'10.0.0.2:2375'", r"node_hosts\.node2: .*unix:///path, ssh://user@host"),
        ("'ssh://10.0.0.2'", r"node_hosts\.node2: .*ssh://user@host"),
        ("'unix://run/x.sock'", r"node_hosts\.node2: .*absolute socket path"),
        ("{host: 'tcp://h:2376', tls: {ca_cert: /a}}", r"node_hosts\.node2\.tls\.client_cert"),
        (
            "{host: 'tcp://h:2376', tls: {ca_cert: /a, client_cert: /b, client_key: '../k'}}",
            r"node_hosts\.node2\.tls\.client_key: a path without '\.\.'",
        ),
        ("{host: 'tcp://h:2376', verify: false}", r"node_hosts\.node2\.verify: not a key"),
    ],
)
def test_bad_entries_name_the_field(tmp_path, entry, why) -> None:
    with pytest.raises(ConfigError, match=why):
        _load(tmp_path, f"  node_hosts: {{node2: {entry}}}\n")


def test_socket_ssh_and_tls_entries_are_accepted(tmp_path) -> None:
    cfg = _load(
        tmp_path,
        "  node_hosts:\n"
        "    node1: unix:///run/flowcon-node2.sock\n"
        "    node2: ssh://flowcon@10.0.0.2\n"
        "    node3: {host: 'tcp://10.0.0.3:2376', tls: {ca_cert: /c/ca.pem,"
        " client_cert: /c/cert.pem, client_key: /c/key.pem}}\n"
        "    node4: tcp://10.0.0.4:2376\n"
        "  node_tls: {ca_cert: /s/ca.pem, client_cert: /s/cert.pem, client_key: /s/key.pem}\n",
    )
    ex = cfg.section("executor")
    hosts = parse_node_hosts(ex["node_hosts"], ex.get("node_tls"))
    assert hosts["node1"].tls is None
    assert hosts["node2"].scheme == "ssh"
    assert hosts["node3"].tls == NodeTls("/c/ca.pem", "/c/cert.pem", "/c/key.pem")
    assert hosts["node4"].tls == NodeTls("/s/ca.pem", "/s/cert.pem", "/s/key.pem")  # shared


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
