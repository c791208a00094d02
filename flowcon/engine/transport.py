"""Keep-alive HTTP to the engine, without the SDK's per-request machinery.

The agent makes about one engine call per container per round. Through the Docker
SDK (requests + urllib3) each call costs ~1-2 ms of Python, and ``logs()`` adds an
``inspect`` of its own to learn whether the container has a TTY; over a bare
``http.client`` connection kept alive on the socket the same call costs ~0.2 ms.
So: ``unix://`` and plain ``tcp://`` hosts use pooled ``http.client`` connections;
anything else (TLS, ssh) goes through the SDK's session, which knows how.

Both give the caller one thing: a response with ``status``, ``read(n)`` (de-chunked
body) and ``close()``. Connection-level failures become ``Unreachable``.
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any, Protocol
from urllib.parse import urlsplit


class Unreachable(OSError):
    """The engine did not answer (socket missing, refused, reset, timed out)."""


class Response(Protocol):
    status: int

    def read(self, amt: int | None = None) -> bytes: ...

    def close(self) -> None: ...


class Transport(Protocol):
    # Connections the engine dropped and that were made again (its restart, typically):
    # the engine adapter negotiates its API version again when this changes.
    reconnects: int

    def open(
        self, method: str, path: str, body: bytes | None = None
    ) -> contextlib.AbstractContextManager[Response]: ...

    def close(self) -> None: ...


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self.socket_path = path

    def connect(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            sock.connect(self.socket_path)
        except BaseException:
            sock.close()
            raise
        self.sock = sock


# A kept-alive connection the engine closed meanwhile (idle, or the engine restarted)
# fails on first use with one of these; the request is then sent once more on a new one.
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError)


class PooledHTTP:
    """A small LIFO pool of keep-alive ``http.client`` connections (one per thread in use)."""

    def __init__(self, factory: Callable[[], http.client.HTTPConnection], keep: int = 8) -> None:
        self._factory = factory
        self._keep = keep
        self._idle: list[http.client.HTTPConnection] = []
        self._lock = threading.Lock()
        self.reconnects = 0

    def _acquire(self) -> http.client.HTTPConnection:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return self._factory()

    def _release(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if len(self._idle) < self._keep:
                self._idle.append(conn)
                return
        conn.close()

    def _send(
        self, conn: http.client.HTTPConnection, method: str, path: str, body: bytes | None
    ) -> http.client.HTTPResponse:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        for attempt in (0, 1):
            reused = conn.sock is not None
            try:
                conn.request(method, path, body=body, headers=headers)
                return conn.getresponse()
            except _STALE as exc:
                conn.close()
                if attempt or not reused:
                    raise Unreachable(f"{exc.__class__.__name__}: {exc}") from exc
                with self._lock:
                    self.reconnects += 1
            except (TimeoutError, OSError, http.client.HTTPException) as exc:
                conn.close()
                raise Unreachable(f"{exc.__class__.__name__}: {exc}") from exc
        raise AssertionError("unreachable")  # pragma: no cover

    @contextlib.contextmanager
    def open(self, method: str, path: str, body: bytes | None = None) -> Iterator[Response]:
        conn = self._acquire()
        resp: http.client.HTTPResponse | None = None
        try:
            resp = self._send(conn, method, path, body)
            yield resp
        except (TimeoutError, OSError, http.client.HTTPException) as exc:
            conn.close()
            if isinstance(exc, Unreachable):
                raise
            raise Unreachable(f"{exc.__class__.__name__}: {exc}") from exc
        finally:
            # Reusable only when the body was read to the end; otherwise drop the socket
            # (what is left of the body would be read as the next response).
            if resp is not None and not resp.isclosed():
                resp.close()
                conn.close()
            self._release(conn)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class _SdkResponse:
    def __init__(self, resp: Any) -> None:
        self._resp = resp
        self.status = int(resp.status_code)

    def read(self, amt: int | None = None) -> bytes:
        return bytes(self._resp.raw.read(amt, decode_content=True) or b"")

    def close(self) -> None:
        self._resp.close()


class SdkTransport:
    """TLS or ssh hosts: the Docker SDK's session (requests) does the connecting."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.reconnects = 0  # requests reconnects on its own, unseen: never counted

    @contextlib.contextmanager
    def open(self, method: str, path: str, body: bytes | None = None) -> Iterator[Response]:
        import requests.exceptions

        url = self.api.base_url + path
        try:
            if method == "GET":
                raw = self.api._get(url, stream=True)
            else:
                headers = {"Content-Type": "application/json"}
                raw = self.api._post(url, data=body, headers=headers, stream=True)
        except (requests.exceptions.RequestException, OSError) as exc:
            raise Unreachable(f"{exc.__class__.__name__}: {exc}") from exc
        resp = _SdkResponse(raw)
        try:
            yield resp
        except (requests.exceptions.RequestException, OSError) as exc:
            raise Unreachable(f"{exc.__class__.__name__}: {exc}") from exc
        finally:
            resp.close()

    def close(self) -> None:
        self.api.close()


def direct_transport(base_url: str, timeout: float, keep: int) -> PooledHTTP | None:
    """A pooled http.client transport for ``unix://`` and ``tcp://``/``http://`` hosts;
    None when the SDK must connect (TLS, ssh, npipe)."""
    parts = urlsplit(base_url)
    if parts.scheme in ("unix", "http+unix"):
        path = parts.path or parts.netloc
        return PooledHTTP(lambda: _UnixConnection(path, timeout), keep)
    if parts.scheme in ("tcp", "http") and parts.hostname:
        host, port = parts.hostname, parts.port or 2375
        return PooledHTTP(lambda: http.client.HTTPConnection(host, port, timeout=timeout), keep)
    return None
