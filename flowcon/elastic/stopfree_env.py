"""The stop-free runtime's settings read from the environment (names in ``flowcon.contract``).

``FLOWCON_STRAGGLER`` (the straggler detector, EDL 5.2), ``FLOWCON_LEAVE_SETTLE_S`` (how
long leave requests settle, ``rendezvous.decide``), and the worker id used when the executor
gave none (``FLOWCON_WORKER_ID``). A bad value raises ``ValueError`` naming the variable.
"""

from __future__ import annotations

import math
import os
import secrets
import socket
from collections.abc import Mapping
from typing import Final

from flowcon import contract
from flowcon.elastic.straggler import StragglerDetector

STRAGGLER_DEFAULT: Final = (1.2, 10)


def straggler_from_env(env: Mapping[str, str] | None = None) -> StragglerDetector[str] | None:
    """``FLOWCON_STRAGGLER``: "RATIO,CONSECUTIVE" (default 1.2,10, EDL 5.2); "0"/"off": none."""
    raw = (os.environ if env is None else env).get(contract.ENV_STRAGGLER, "").strip().lower()
    if raw in ("0", "off", "false", "no"):
        return None
    ratio, consecutive = STRAGGLER_DEFAULT
    if raw:
        try:
            parts = [p.strip() for p in raw.split(",")]
            ratio = float(parts[0])
            consecutive = int(parts[1]) if len(parts) > 1 else consecutive
        except (ValueError, IndexError):
            raise ValueError(
                f"environment {contract.ENV_STRAGGLER}={raw!r}: expected RATIO,CONSECUTIVE or 0"
            ) from None
    return StragglerDetector(ratio=ratio, consecutive=consecutive)


LEAVE_SETTLE_DEFAULT_S: Final = 1.0


def leave_settle_from_env(env: Mapping[str, str] | None = None) -> float:
    """``FLOWCON_LEAVE_SETTLE_S``: seconds leave requests settle (rendezvous.decide)."""
    raw = (os.environ if env is None else env).get(contract.ENV_LEAVE_SETTLE_S, "").strip()
    if not raw:
        return LEAVE_SETTLE_DEFAULT_S
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    return settle_seconds(value, f"environment {contract.ENV_LEAVE_SETTLE_S}={raw!r}")


def settle_seconds(value: float, what: str) -> float:
    """``value`` as a leave-settle time: finite seconds >= 0, else a ValueError naming
    ``what`` (the variable or the parameter it came from)."""
    if not 0 <= value < math.inf:
        raise ValueError(f"{what}: expected seconds >= 0")
    return float(value)


def default_worker_id() -> str:
    """A worker id when the executor gave none: containers on host networking share the
    hostname, and each may be PID 1, so a random part keeps the ids apart."""
    return f"{socket.gethostname()}-{secrets.token_hex(3)}"
