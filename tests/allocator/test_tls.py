"""TLS on the allocator's API (stdlib ssl): clients and agents check its certificate
against the CA they are given; a non-loopback listen address without TLS is refused at
start unless the operator says so."""

from __future__ import annotations

import socket
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.agent.reporter import AllocatorReporter
from flowcon.allocator.config import AllocatorConfig, ConfigError, load_config
from flowcon.allocator.daemon import Allocator, run_daemon
from flowcon.cli import main
from flowcon.client.http import AllocatorClient, ClientError

TOKEN = "op-t0ken-tls-0000"


def self_signed(folder: Path, host: str = "127.0.0.1") -> tuple[Path, Path]:
    """A self-signed certificate for ``host`` (its own CA) and its key, by openssl."""
    cert, key = folder / "api.crt", folder / "api.key"
    subprocess.run(
        [
            "openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
            "-subj", f"/CN={host}", "-addext", f"subjectAltName=IP:{host}",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_daemon(tmp_path: Path) -> Iterator[tuple[Allocator, Path]]:
    cert, key = self_signed(tmp_path)
    cfg = AllocatorConfig(
        state_dir=tmp_path / "state",
        listen="127.0.0.1:0",
        token=TOKEN,
        tls_cert_file=cert,
        tls_key_file=key,
    )
    alloc = Allocator(cfg, target=None, total_gpus=4)
    alloc.start(port=0)
    yield alloc, cert
    alloc.stop()


def test_clients_reach_the_api_over_tls_with_its_ca(tls_daemon: tuple[Allocator, Path]) -> None:
    alloc, cert = tls_daemon
    assert alloc.url.startswith("https://127.0.0.1:")
    client = AllocatorClient(alloc.url, TOKEN, timeout=10, cacert=str(cert))
    assert client.whoami() == {"name": "operator", "roles": ["agent", "read", "user"]}
    # without the CA the certificate is not trusted: no token is sent to an unknown server
    with pytest.raises(ClientError) as exc:
        AllocatorClient(alloc.url, TOKEN, timeout=10).jobs()
    assert "CERTIFICATE_VERIFY_FAILED" in str(exc.value)
    # plain HTTP on the TLS port gets no answer, and the server goes on
    with pytest.raises(ClientError):
        AllocatorClient(alloc.url.replace("https:", "http:"), TOKEN, timeout=5).jobs()
    # the agents' reports and the CLI, given the CA
    reporter = AllocatorReporter(alloc.url, TOKEN, "node1", 5.0, cacert=str(cert))
    assert reporter.send([])
    out = CliRunner(env={"FLOWCON_CACERT": str(cert)}).invoke(
        main, ["jobs", "--url", alloc.url, "--token", TOKEN]
    )
    assert out.exit_code == 0, out.output


def test_a_silent_client_does_not_stall_the_api(tls_daemon: tuple[Allocator, Path]) -> None:
    """The handshake happens in the connection's own thread: a client that connects and
    sends nothing does not keep others out."""
    alloc, cert = tls_daemon
    port = int(alloc.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port)):
        client = AllocatorClient(alloc.url, TOKEN, timeout=5, cacert=str(cert))
        assert client.jobs() == []


def test_a_public_listen_address_needs_tls_or_the_operators_word(tmp_path: Path) -> None:
    cfg = AllocatorConfig(state_dir=tmp_path / "s", listen="0.0.0.0:0", token=TOKEN)
    with pytest.raises(ConfigError) as exc:
        run_daemon(cfg)
    assert str(exc.value) == (
        "allocator.listen 0.0.0.0:0 is not a loopback address and the API has no TLS: every"
        " token would cross the network in clear; set allocator.tls_cert_file and"
        " tls_key_file, or allocator.insecure_listen: true on a trusted network"
    )
    for ok in (
        AllocatorConfig(listen="127.0.0.1:1"),
        AllocatorConfig(listen="localhost:1"),
        AllocatorConfig(listen="[::1]:1"),
        AllocatorConfig(listen="0.0.0.0:1", insecure_listen=True),
        AllocatorConfig(listen="0.0.0.0:1", tls_cert_file=Path("c"), tls_key_file=Path("k")),
    ):
        assert ok.listen_problem() is None, ok


def test_tls_settings_in_the_config(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    path = tmp_path / "allocator.yaml"
    path.write_text(f"allocator:\n  tls_cert_file: api.crt\n  tls_key_file: {key}\n")
    cfg = load_config(path, {}, tmp_path / "no-secrets")
    assert cfg.tls_cert_file == cert  # relative to the config's folder
    assert cfg.client_url.startswith("https://")
    path.write_text("allocator:\n  tls_cert_file: api.crt\n")
    with pytest.raises(ConfigError) as exc:
        load_config(path, {}, tmp_path / "no-secrets")
    assert "allocator.tls_cert_file and tls_key_file: both, or neither" in str(exc.value)


def test_ssl_context_is_tls12_or_newer(tmp_path: Path) -> None:
    from flowcon.tls import client_context, server_context

    cert, key = self_signed(tmp_path)
    assert server_context(cert, key).minimum_version >= ssl.TLSVersion.TLSv1_2
    assert client_context(cert).verify_mode == ssl.CERT_REQUIRED
