"""Which node engine addresses the executor may use (``executor.node_hosts``), pure.

A node's engine starts privileged containers: whoever can call its API is root on the node.
Every job on the Swarm backend runs on the host network, so an engine listening on plain
TCP is open to every job. An entry is therefore one of

* ``unix:///path`` (an engine of this machine, through its socket),
* ``ssh://user@host[:port]`` (docker's ssh transport: the ssh client and its keys), or
* ``tcp://host:port`` (or ``https://``) with mutual TLS: the node's own ``tls`` or the
  shared ``executor.node_tls`` (``ca_cert``, ``client_cert``, ``client_key``: the engine's
  certificate is checked against the CA, and the engine checks ours, ``--tlsverify``).

Anything else, a ``tcp://`` without TLS in particular, is refused naming the entry
(``executor.node_hosts.node2``). Connecting is the Swarm backend's (``connect_node``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from flowcon.schema import path_problem

TLS_KEYS = ("ca_cert", "client_cert", "client_key")


@dataclass(frozen=True)
class NodeTls:
    """The client side of mutual TLS to a node's engine (PEM files)."""

    ca_cert: str
    client_cert: str
    client_key: str


@dataclass(frozen=True)
class NodeHost:
    """One node's engine: its address and, for TCP, the TLS to reach it with."""

    node: str
    url: str
    tls: NodeTls | None = None

    @property
    def scheme(self) -> str:
        return urlsplit(self.url).scheme


def parse_tls(raw: object, where: str) -> NodeTls:
    """A ``tls`` mapping; ValueError naming ``where`` and the key at fault."""
    if isinstance(raw, NodeTls):
        return raw
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: a mapping of {', '.join(TLS_KEYS)} (PEM files)")
    extra = sorted(set(map(str, raw)) - set(TLS_KEYS))
    if extra:
        raise ValueError(f"{where}.{extra[0]}: not a key (one of {', '.join(TLS_KEYS)})")
    paths: dict[str, str] = {}
    for key in TLS_KEYS:
        value = raw.get(key)
        if not isinstance(value, str) or not value:
            raise ValueError(f"{where}.{key}: a PEM file is needed")
        why = path_problem(value)
        if why:
            raise ValueError(f"{where}.{key}: {why}")
        paths[key] = value
    return NodeTls(**paths)


def _entry(where: str, raw: object) -> tuple[str, NodeTls | None]:
    """An entry's address and own TLS (an address, or ``{host, tls}``)."""
    if isinstance(raw, NodeHost):
        return raw.url, raw.tls
    if isinstance(raw, str):
        return raw, None
    if not isinstance(raw, Mapping):
        raise ValueError(f"{where}: an engine address, or a mapping {{host, tls}}")
    extra = sorted(set(map(str, raw)) - {"host", "tls"})
    if extra:
        raise ValueError(f"{where}.{extra[0]}: not a key (host, tls)")
    url = raw.get("host")
    if not isinstance(url, str):
        raise ValueError(f"{where}.host: an engine address (unix://, ssh://, tcp://)")
    tls = raw.get("tls")
    return url, parse_tls(tls, f"{where}.tls") if tls is not None else None


def parse_node_host(node: str, raw: object, shared_tls: NodeTls | None) -> NodeHost:
    """One ``node_hosts`` entry (an address, or ``{host, tls}``); ValueError naming it."""
    where = f"executor.node_hosts.{node}"
    url, own_tls = _entry(where, raw)
    parts = urlsplit(url)
    scheme = parts.scheme
    if scheme == "unix":
        if parts.netloc or not parts.path.startswith("/"):
            raise ValueError(f"{where}: {url!r}: unix:// needs an absolute socket path")
        return NodeHost(node, url)
    if scheme == "ssh":
        if not parts.hostname or not parts.username:
            raise ValueError(f"{where}: {url!r}: ssh://user@host[:port]")
        return NodeHost(node, url)
    if scheme in ("tcp", "http", "https"):
        if not parts.hostname:
            raise ValueError(f"{where}: {url!r}: tcp://host:port")
        tls = own_tls or shared_tls
        if tls is None:
            raise ValueError(
                f"{where}: {url!r} without TLS: anyone who reaches the port (every job on"
                " the host network) can start a privileged container there; give the node's"
                " tls {ca_cert, client_cert, client_key} or executor.node_tls, with the engine"
                " run with --tlsverify, or use ssh://user@host"
            )
        return NodeHost(node, url, tls)
    raise ValueError(f"{where}: {url!r}: unix:///path, ssh://user@host or tcp://host:port with TLS")


def parse_node_hosts(
    raw: Mapping[str, object] | None, shared_tls: object = None
) -> dict[str, NodeHost]:
    """Every ``node_hosts`` entry checked (ValueError naming the first one at fault)."""
    shared = parse_tls(shared_tls, "executor.node_tls") if shared_tls is not None else None
    return {str(k): parse_node_host(str(k), v, shared) for k, v in dict(raw or {}).items()}
