"""A tiny GET-only HTTP server for the agent (its metrics port): one ``route`` function
maps a path to (status, body, content type)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

Route = Callable[[str, dict[str, list[str]]], tuple[int, bytes, str]]


class _Handler(BaseHTTPRequestHandler):
    route: Route
    server_version = "flowcon/1"

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s %s", self.address_string(), format % args)

    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        try:
            status, body, ctype = self.route(parts.path, parse_qs(parts.query))
        except Exception as exc:  # a bug must not kill the server thread
            log.exception("GET %s failed", parts.path)
            body = f'{{"error": "{type(exc).__name__}"}}'.encode()
            status, ctype = 500, "application/json"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(body)


class HttpServer:
    """Serves ``route`` on its own daemon thread; ``port=0`` picks a free port."""

    def __init__(self, route: Route, host: str = "0.0.0.0", port: int = 0) -> None:
        handler = type("Handler", (_Handler,), {"route": staticmethod(route)})
        self.httpd = ThreadingHTTPServer((host, port), handler)
        self.httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self.httpd.serve_forever, name="flowcon-http", daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(timeout=5)
