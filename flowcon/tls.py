"""TLS for the allocator's API (stdlib ``ssl``): the server's context from its certificate
and key, and the clients' (CLI, agents) from the CA they trust."""

from __future__ import annotations

import ssl
from pathlib import Path

# a PEM file: the CA (or the self-signed certificate) of the API's certificate, for the
# CLI, the agents and the container healthcheck
ENV_CACERT = "FLOWCON_CACERT"


def server_context(cert_file: str | Path, key_file: str | Path) -> ssl.SSLContext:
    """The API's context: TLS 1.2 or newer, the certificate (and its chain) and key given.
    Raises ``OSError``/``ssl.SSLError`` naming what could not be read."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(str(cert_file), str(key_file))
    return ctx


def client_context(cacert: str | Path | None) -> ssl.SSLContext:
    """A client's context: the server's certificate checked against ``cacert`` (a PEM
    file: a CA, or a self-signed certificate) or, when None, the system's CAs; host names
    checked."""
    ctx = ssl.create_default_context(cafile=str(cacert) if cacert else None)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    return ctx
