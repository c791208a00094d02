"""The allocator's audit log: one JSON line per API call that changes state (allowed or
refused) and per refused read, on the ``flowcon.allocator.audit`` logger (pure helpers).

A line: ``{"ts", "principal", "role", "source", "method", "path", "job", "status",
"outcome", "reason"}``; ``outcome`` is ``allowed`` or ``refused``, ``reason`` why a call
was refused (the ``reason`` label of ``flowcon_allocator_refused_calls_total``). The
agents' measurement reports (one per node every itval) are counted in
``flowcon_allocator_measurements_total`` instead; a refused one is audited.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Mapping

log = logging.getLogger("flowcon.allocator.audit")

_BY_STATUS = {
    400: "invalid",
    401: "unauthenticated",
    403: "forbidden",
    404: "not_found",
    405: "method",
    409: "conflict",
    411: "body",
    413: "body",
    507: "store",
}


def refusal_reason(status: int, body: Mapping[str, object]) -> str | None:
    """Why a call answered ``status`` was refused (None: it was not, 2xx/3xx, or it
    failed on the allocator's side, 5xx other than a full store)."""
    if status < 400 or (status >= 500 and status != 507):
        return None
    if status == 403 and body.get("field") == "quota":
        return "quota"
    if status == 403 and "owner" in body:
        return "not_owner"
    return _BY_STATUS.get(status, "other")


def audited(method: str, path: str, status: int) -> bool:
    """Whether a call goes into the audit log: every change and every refusal, but not
    an agent's accepted measurement report."""
    if method in ("GET", "HEAD"):
        return status >= 400 and path.startswith("/api/")
    if path == "/api/v1/measurements":
        return status >= 400
    return True


def record(
    principal: str | None,
    role: str,
    source: str,
    method: str,
    path: str,
    job: str | None,
    status: int,
    reason: str | None,
) -> str:
    """The audit line (also logged at INFO)."""
    line = json.dumps(
        {
            "ts": round(time.time(), 3),
            "principal": principal,
            "role": role,
            "source": source,
            "method": method,
            "path": path,
            "job": job,
            "status": status,
            "outcome": "refused" if reason else "allowed",
            "reason": reason,
        },
        separators=(",", ":"),
    )
    log.info("%s", line)
    return line
