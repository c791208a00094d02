"""Straggler detection: a worker slower than ratio x the median for N consecutive steps.

EDL (shared/papers/edl.txt, section 5.2, "Straggler mitigation"): "If a worker is
consistently slower than other workers in a few consecutive mini-batches (e.g., its
per-mini-batch time is longer than 1.2 times of the median for 10 mini-batches), the leader
may trigger a scale_in() operation to remove this worker". This module is that rule, pure:
fed each step's per-worker times, it says who is a straggler now; removing it is the
runtime's job.

The times must be each worker's *own* work for the step (data, forward, backward up to the
gradient synchronisation), as EDL measures it from the arrival of the synchronisation
request: after the all-reduce every worker has waited for the slowest and all look alike.

Keys identify workers. Key by a stable worker id (``FLOWCON_WORKER_ID``) and a scale event
needs nothing: workers that stay keep their streaks, new ones start at zero, those gone are
forgotten. Key by rank and call ``reset()`` at every scale event (ranks are renumbered).
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class StragglerDetector(Generic[K]):
    """``observe(times)`` once per step; returns the workers slower than ``ratio`` x the
    step's median for the last ``consecutive`` steps in a row (EDL section 5.2).

    The answer is a level, not an edge: a straggler is returned at every step until it is
    gone from the times, recovers, or is ``forget``-ed. A world of one has no stragglers.
    """

    def __init__(self, ratio: float = 1.2, consecutive: int = 10) -> None:
        if not ratio > 1.0:
            raise ValueError(f"ratio must be > 1, got {ratio}")
        if consecutive < 1:
            raise ValueError(f"consecutive must be >= 1, got {consecutive}")
        self.ratio = ratio
        self.consecutive = consecutive
        self._streak: dict[K, int] = {}
        self._recent: dict[K, deque[float]] = {}

    def observe(self, times: Mapping[K, float]) -> list[K]:
        """One step's times per worker (seconds); returns the stragglers, in ``times`` order."""
        for key, t in times.items():
            if not (math.isfinite(t) and t >= 0):
                raise ValueError(f"step time of {key!r} is {t!r}")
        for gone in [k for k in self._streak if k not in times]:
            self.forget(gone)
        if not times:
            return []
        limit = self.ratio * statistics.median(times.values())
        out: list[K] = []
        for key, t in times.items():
            recent = self._recent.setdefault(key, deque(maxlen=self.consecutive))
            recent.append(t)
            streak = self._streak.get(key, 0) + 1 if t > limit else 0
            self._streak[key] = streak
            if streak >= self.consecutive:
                out.append(key)
        return out

    def streak(self, key: K) -> int:
        """Consecutive slow steps of ``key`` up to the last one observed."""
        return self._streak.get(key, 0)

    def recent(self, key: K) -> list[float]:
        """``key``'s last ``consecutive`` step times (for the ``straggler_removed`` event)."""
        return list(self._recent.get(key, ()))

    def forget(self, key: K) -> None:
        """Drop ``key``'s history (it left, or it was handled)."""
        self._streak.pop(key, None)
        self._recent.pop(key, None)

    def reset(self) -> None:
        """Forget every worker (ranks renumbered at a scale event)."""
        self._streak.clear()
        self._recent.clear()
