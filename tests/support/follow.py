"""The output of every container of a job, followed from its start to its exit: the
executor removes a stop-free container that left, and its lines must still count."""

from __future__ import annotations

import threading
from typing import Any

from flowcon.executor.stopfree_plan import json_objects


class Follow:
    """Every container of job ``job`` (label ``flowcon.job``), followed by a thread each;
    by container id, so a container made again under the same name (a checkpoint-restart)
    is followed too."""

    def __init__(self, client: Any, job: str) -> None:
        self.client, self.job = client, job
        self.lines: dict[str, list[str]] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def poll(self) -> None:
        """Follow the job's containers not followed yet."""
        found = self.client.containers.list(
            ignore_removed=True, all=True, filters={"label": f"flowcon.job={self.job}"}
        )
        for c in found:
            if c.id in self.lines:
                continue
            self.lines[c.id] = []
            t = threading.Thread(target=self._follow, args=(c,), daemon=True)
            t.start()
            self._threads.append(t)

    def _follow(self, c: Any) -> None:
        buf = b""
        try:
            for chunk in c.logs(stream=True, follow=True, stdout=True, stderr=False):
                buf += chunk
                *done, buf = buf.split(b"\n")
                with self._lock:
                    self.lines[c.id].extend(d.decode(errors="replace") for d in done)
        except Exception:  # the container went: what was read stays
            return

    def objects(self) -> list[dict[str, Any]]:
        self.poll()
        with self._lock:
            text = [ln for lines in self.lines.values() for ln in lines]
        return list(json_objects(text))

    def steps(self) -> list[dict[str, Any]]:
        """Every rank 0's step lines, in time order."""
        lines = [o for o in self.objects() if "event" not in o and "step" in o]
        return sorted(lines, key=lambda o: float(o.get("ts", 0)))

    def events(self, kind: str) -> list[dict[str, Any]]:
        return [o for o in self.objects() if o.get("event") == kind]

    def at(self, world: int, after: int = 0) -> int:
        return sum(1 for m in self.steps()[after:] if m.get("world_size") == world)


def exactly_once(lines: list[dict[str, Any]], global_batch: int, samples: int) -> None:
    """Each step's global batch whole, each sample at most once per epoch."""
    by_epoch: dict[int, list[int]] = {}
    for m in lines:
        assert len(m["sample_ids"]) == global_batch, m["step"]
        by_epoch.setdefault(m["epoch"], []).extend(m["sample_ids"])
    for epoch, ids in by_epoch.items():
        assert len(set(ids)) == len(ids), epoch
        assert set(ids) <= set(range(samples)), epoch
