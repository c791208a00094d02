"""The agent's error and update counters (plain integers under a lock; the exporter reads
them at scrape time as Prometheus counters)."""

from __future__ import annotations

import threading

# engine operations whose failures are counted
OPERATIONS = ("list", "measure", "update", "restore")


class AgentCounters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.engine_errors: dict[str, int] = dict.fromkeys(OPERATIONS, 0)
        self.cpu_updates = 0
        # managed containers whose CPU settings someone else changed (flowcon/agent/foreign.py)
        self.foreign_changes = 0

    def engine_error(self, operation: str) -> None:
        with self._lock:
            self.engine_errors[operation] = self.engine_errors.get(operation, 0) + 1

    def cpu_update(self) -> None:
        with self._lock:
            self.cpu_updates += 1

    def foreign_change(self) -> None:
        with self._lock:
            self.foreign_changes += 1

    def foreign_total(self) -> int:
        with self._lock:
            return self.foreign_changes

    def snapshot(self) -> tuple[dict[str, int], int]:
        with self._lock:
            return dict(self.engine_errors), self.cpu_updates
