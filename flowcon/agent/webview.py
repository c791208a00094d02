"""The agent's HTTP endpoints on its metrics port: ``/metrics`` (Prometheus), ``/healthz``
(200 / 503, see flowcon.web.health), ``/api/history`` (the rounds kept in memory, JSON)
and the per-host live view ``/ui`` with its ``/static/*`` files."""

from __future__ import annotations

import json
import socket
import time
from typing import Any

from flowcon.agent.exporter import Exporter, cadvisor_id
from flowcon.web.health import Liveness
from flowcon.web.history import History
from flowcon.web.static import static_response

_JSON = "application/json"
_PROM = "text/plain; version=0.0.4; charset=utf-8"

# what one round keeps per container in the history (the page's series)
_KEEP = ("name", "job", "list", "managed", "g", "limit", "cpus", "cpu_share", "step")


def round_point(views: list[dict[str, Any]]) -> dict[str, Any]:
    """One round's containers as the history keeps them, keyed by full container id."""
    return {
        str(v["container_id"]): {k: v.get(k) for k in _KEEP} for v in views if "container_id" in v
    }


class AgentWeb:
    def __init__(
        self,
        exporter: Exporter,
        liveness: Liveness,
        history: History,
        host_cpus: int,
        node: str | None = None,
    ) -> None:
        self.exporter = exporter
        self.liveness = liveness
        self.history = history
        self.host_cpus = host_cpus
        self.node = node or socket.gethostname()

    def record_round(self, views: list[dict[str, Any]], itval: float) -> None:
        """After each round: metrics, history and liveness."""
        now = time.time()
        self.exporter.update(views, itval, now)
        self.history.append(now, itval=itval, containers=round_point(views))
        self.liveness.set_interval(itval)
        self.liveness.beat()

    def _json(self, status: int, body: Any) -> tuple[int, bytes, str]:
        return status, json.dumps(body, default=str).encode(), _JSON

    def route(self, path: str, query: dict[str, list[str]]) -> tuple[int, bytes, str]:
        path = path.rstrip("/") or "/"
        if path == "/metrics":
            return 200, self.exporter.render(), _PROM
        if path == "/healthz":
            health = self.liveness.check(component="agent", node=self.node)
            return self._json(health.status_code, health.body)
        if path == "/api/history":
            since = None
            if query.get("since"):
                try:
                    since = float(query["since"][0])
                except ValueError:
                    return self._json(400, {"error": "since must be a Unix time"})
            body = {
                "node": self.node,
                "host_cpus": self.host_cpus,
                "id_prefix": cadvisor_id(""),
                "points": self.history.points(since),
            }
            return self._json(200, body)
        if path in ("/", "/ui") or path.startswith("/static/"):
            found = static_response("/ui" if path == "/" else path, "agent.html")
            if found is not None:
                return found
        return self._json(404, {"error": "no such route"})
