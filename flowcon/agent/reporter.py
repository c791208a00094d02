"""Report measurements to the allocator service (its /api/v1/measurements contract).

Stdlib urllib, a short timeout, and every failure is a log line: the agent's own
control loop must never wait on or die because of the allocator.
"""

from __future__ import annotations

import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any

from flowcon.contract import MEASUREMENT_FIELDS, Measurement, MeasurementReport
from flowcon.tls import client_context

log = logging.getLogger("flowcon.agent.reporter")

FIELDS = MEASUREMENT_FIELDS


def measurement(view: dict[str, Any]) -> Measurement:
    """The contract's measurement of one container, from the controller's view of it."""
    m = Measurement(
        container_id=view["container_id"],
        name=view["name"],
        job=view.get("job"),
        step=view.get("step"),
        iterations_per_second=view.get("iterations_per_second"),
        metric=view.get("metric"),
        value=view.get("value"),
        ts=view["ts"],
        step_ts=view.get("step_ts"),
    )
    if view.get("gpu_share") is not None:  # only where a GPU was measured: older
        m["gpu_utilization"] = view["gpu_share"]  # allocators see the fields they knew
    return m


def payload(
    node: str, views: list[dict[str, Any]], toolkit: str | None = None
) -> MeasurementReport:
    """The report body; ``toolkit``: what the node's NVIDIA toolkit lets containers do
    (flowcon/agent/toolkit.py), left out when unknown so older allocators see what they knew."""
    report = MeasurementReport(node=node, measurements=[measurement(v) for v in views])
    if toolkit is not None:
        report["toolkit"] = toolkit
    return report


def only_fresh_rates(views: list[dict[str, Any]], last: dict[str, float]) -> list[dict[str, Any]]:
    """Blank the rate of a container whose newest step is the one already reported.

    The monitor keeps its last rate between step lines (for ``flowcon status``); sent
    again, a stale rate would count as a new measurement of the job's speed. ``last``
    (container id -> step_ts of the last rate sent) is updated in place.
    """
    out = []
    for view in views:
        cid, step_ts = view.get("container_id"), view.get("step_ts")
        if step_ts is None or cid is None or last.get(cid) == step_ts:
            view = {**view, "iterations_per_second": None}
        elif view.get("iterations_per_second") is not None:
            last[cid] = step_ts
        out.append(view)
    present = {v.get("container_id") for v in views}
    for gone in set(last) - present:
        del last[gone]
    return out


class AllocatorReporter:
    def __init__(
        self,
        url: str,
        token: str | None,
        node: str,
        timeout: float = 5.0,
        cacert: str | None = None,
        toolkit: str | None = None,
    ) -> None:
        """``cacert``: the CA (PEM) an https allocator's certificate is checked with;
        ``toolkit``: the node's NVIDIA toolkit state, sent with every report."""
        self.endpoint = url.rstrip("/") + "/api/v1/measurements"
        self._tls = client_context(cacert) if self.endpoint.startswith("https:") else None
        self.token = token
        self.node = node
        self.toolkit = toolkit
        self.timeout = timeout
        self.failures = 0
        self.sent = 0
        self._rate_step_ts: dict[str, float] = {}

    def send(self, views: list[dict[str, Any]]) -> bool:
        views = only_fresh_rates(views, self._rate_step_ts)
        body = json.dumps(payload(self.node, views, self.toolkit), allow_nan=False).encode()
        req = urllib.request.Request(self.endpoint, data=body, method="POST")
        req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        t0 = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=self.timeout, context=self._tls) as resp:
                resp.read(1024)
            self.sent += 1
            if self.failures:
                log.info("allocator reachable again after %d failure(s)", self.failures)
            self.failures = 0
            return True
        except (urllib.error.URLError, OSError, ValueError) as exc:
            self.failures += 1
            if self.failures == 1 or self.failures % 30 == 0:
                log.warning(
                    "allocator report failed (%d in a row, %.1fs): %s",
                    self.failures,
                    time.monotonic() - t0,
                    exc,
                )
            return False
