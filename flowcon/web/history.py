"""Bounded in-memory history for the live view: a ring buffer of timestamped points that
the pages poll as JSON (pure; thread-safe, since HTTP threads read while a loop appends)."""

from __future__ import annotations

import threading
from collections import deque
from typing import Any

DEFAULT_POINTS = 720  # 4 h at the agent's 20 s interval, 12 h at the allocator's 60 s slot


class History:
    def __init__(self, maxlen: int = DEFAULT_POINTS) -> None:
        if maxlen < 1:
            raise ValueError("maxlen must be >= 1")
        self._points: deque[dict[str, Any]] = deque(maxlen=maxlen)
        self._lock = threading.Lock()

    @property
    def maxlen(self) -> int:
        return self._points.maxlen or 0

    def append(self, ts: float, **values: Any) -> None:
        with self._lock:
            self._points.append({"ts": ts, **values})

    def points(self, since: float | None = None) -> list[dict[str, Any]]:
        """A copy of the points, oldest first; only those after ``since`` if given."""
        with self._lock:
            pts = list(self._points)
        if since is not None:
            pts = [p for p in pts if p["ts"] > since]
        return pts

    def __len__(self) -> int:
        return len(self._points)
