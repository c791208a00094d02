"""A few Prometheus metrics on an optional port (prometheus_client)."""

from __future__ import annotations

import contextlib
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, start_http_server


class Exporter:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        labels = ["container", "name"]
        self.limit = Gauge(
            "flowcon_container_cpu_limit",
            "CPU limit FlowCon applied, in CPUs (0: original settings in effect)",
            labels,
            registry=self.registry,
        )
        self.share = Gauge(
            "flowcon_container_limit_share",
            "Algorithm 1 limit L, a share of the host",
            labels,
            registry=self.registry,
        )
        self.g = Gauge(
            "flowcon_container_growth_efficiency",
            "Normalized growth efficiency G",
            labels,
            registry=self.registry,
        )
        self.cpu = Gauge(
            "flowcon_container_cpu_share",
            "CPU used over the last interval, share of the host",
            labels,
            registry=self.registry,
        )
        self.rounds = Counter(
            "flowcon_agent_rounds", "Algorithm 1 rounds run", registry=self.registry
        )
        self.itval = Gauge(
            "flowcon_agent_itval_seconds", "Current Algorithm 1 interval", registry=self.registry
        )
        self.label_errors = Counter(
            "flowcon_agent_label_errors",
            "Containers skipped for a bad flowcon.* label (once per container and error)",
            ["container", "name"],  # container: the full id, as cAdvisor's series
            registry=self.registry,
        )
        self._known: set[tuple[str, str]] = set()

    def label_error(self, cid: str, name: str, error: str) -> None:
        """A container's labels could not be used (the pool reports each error once)."""
        self.label_errors.labels(cid, name).inc()

    def serve(self, port: int, addr: str = "0.0.0.0") -> None:
        start_http_server(port, addr=addr, registry=self.registry)

    def update(self, views: list[dict[str, Any]], itval: float) -> None:
        self.rounds.inc()
        self.itval.set(itval)
        seen = set()
        for v in views:
            key = (v["container_id"][:12], v["name"])
            seen.add(key)
            self.limit.labels(*key).set(v.get("cpus") or 0.0)
            if v.get("limit") is not None:
                self.share.labels(*key).set(v["limit"])
            if v.get("g") is not None:
                self.g.labels(*key).set(v["g"])
            if v.get("cpu_share") is not None:
                self.cpu.labels(*key).set(v["cpu_share"])
        for key in self._known - seen:
            for gauge in (self.limit, self.share, self.g, self.cpu):
                with contextlib.suppress(KeyError):
                    gauge.remove(*key)
        self._known = seen
