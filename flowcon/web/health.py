"""Liveness of a service loop, for ``/healthz`` (pure: no I/O, the clock is injected).

The loop calls ``beat()`` after each completed round (agent) or planning round
(allocator) and ``engine_ok()`` / ``engine_failed(error)`` after each engine call that
tells whether the engine answers. ``check()`` is healthy while a round completed within
``stale_intervals`` intervals and the last engine call succeeded. Before the first round
the service counts as starting: healthy for ``stale_intervals`` intervals after creation,
so a container's healthcheck does not fail during start-up.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

DEFAULT_STALE_INTERVALS = 3.0


@dataclass(frozen=True)
class Health:
    ok: bool
    body: dict[str, Any]

    @property
    def status_code(self) -> int:
        return 200 if self.ok else 503


class Liveness:
    def __init__(
        self,
        interval: float,
        stale_intervals: float = DEFAULT_STALE_INTERVALS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= 0 or stale_intervals <= 0:
            raise ValueError("interval and stale_intervals must be > 0")
        self.interval = float(interval)
        self.stale_intervals = float(stale_intervals)
        self.clock = clock
        self._lock = threading.Lock()
        self._started = clock()
        self._last_beat: float | None = None
        self._beats = 0
        self._engine_error: str | None = None

    def set_interval(self, interval: float) -> None:
        """The loop's interval changed (the agent's itval backs off): staleness follows."""
        if interval > 0:
            with self._lock:
                self.interval = float(interval)

    def beat(self) -> None:
        with self._lock:
            self._last_beat = self.clock()
            self._beats += 1

    def engine_ok(self) -> None:
        with self._lock:
            self._engine_error = None

    def engine_failed(self, error: str) -> None:
        with self._lock:
            self._engine_error = error or "engine call failed"

    def check(self, **extra: Any) -> Health:
        """200/503 and a small JSON body saying why."""
        with self._lock:
            now = self.clock()
            since = now - (self._last_beat if self._last_beat is not None else self._started)
            limit = self.interval * self.stale_intervals
            stuck = since > limit
            problems = []
            if stuck:
                what = "round" if self._last_beat is not None else "first round"
                problems.append(f"no {what} completed for {since:.0f} s (limit {limit:.0f} s)")
            if self._engine_error is not None:
                problems.append(f"engine: {self._engine_error}")
            body: dict[str, Any] = {
                "status": "ok" if not problems else "unhealthy",
                "rounds": self._beats,
                "seconds_since_round": None if self._last_beat is None else round(since, 3),
                "interval_seconds": self.interval,
                "engine": "ok" if self._engine_error is None else "failing",
            }
        if problems:
            body["problems"] = problems
        body.update(extra)
        return Health(not problems, body)
