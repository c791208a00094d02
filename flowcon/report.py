"""The metric-line format that the agent reads from a container's output.

Stdlib only, so a training script can copy this one file or import it from the
package. One JSON object per line on stdout, flushed at once, so the agent sees
progress as it happens rather than when a buffer fills.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any, TextIO

# Lines the agent accepts are bounded; keep ours far below that bound.
MAX_LINE_BYTES = 64 * 1024


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf; emit null so the line stays valid and the agent skips the value.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return _clean(value.item())
        except (TypeError, ValueError):
            return str(value)
    return value


def format_line(**metrics: Any) -> str:
    """Render one metric line (without the newline)."""
    payload = {key: _clean(val) for key, val in metrics.items()}
    payload.setdefault("ts", round(time.time(), 3))
    line = json.dumps(payload, separators=(",", ":"), default=str)
    if len(line.encode()) > MAX_LINE_BYTES:
        raise ValueError(f"metric line is {len(line)} bytes, over {MAX_LINE_BYTES}")
    return line


def report(stream: TextIO | None = None, **metrics: Any) -> str:
    """Print one metric line, e.g. ``report(step=1200, loss=0.42)``; returns the line."""
    line = format_line(**metrics)
    out = stream if stream is not None else sys.stdout
    out.write(line + "\n")
    out.flush()
    return line
