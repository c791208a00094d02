"""flowcon.web.probe against a real local HTTP server."""

from __future__ import annotations

from flowcon.testing.ports import free_port
from flowcon.web.probe import main, probe
from flowcon.web.server import HttpServer


def test_probe_follows_the_status() -> None:
    state = {"status": 200}

    def route(path: str, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        if path == "/healthz":
            return state["status"], b'{"status": "x"}', "application/json"
        raise RuntimeError("boom")

    srv = HttpServer(route, "127.0.0.1", 0)
    srv.start()
    try:
        url = f"http://127.0.0.1:{srv.port}/healthz"
        assert probe(url) == (True, '200 {"status": "x"}')
        assert main([url]) == 0
        state["status"] = 503
        ok, line = probe(url)
        assert not ok
        assert line.startswith("503")
        assert main([url]) == 1
        ok, line = probe(f"http://127.0.0.1:{srv.port}/other")  # a route that raises
        assert not ok
        assert line.startswith("500")
    finally:
        srv.stop()
    free = free_port()  # a port nobody listens on
    ok, line = probe(f"http://127.0.0.1:{free}/healthz", timeout=2)
    assert not ok
    assert f"127.0.0.1:{free}" in line
