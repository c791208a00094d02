"""Node engines only over a socket, ssh or mutual TLS (flowcon/executor/node_hosts.py): a
``tcp://`` without TLS is refused at config load and at start, naming the entry."""

from __future__ import annotations

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
