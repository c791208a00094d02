"""Executor (paper section 3.2.3): Algorithm 1 applied.

``run`` takes the managed containers' lists, growth efficiencies and limits, runs
``flowcon.core.algorithm1`` and sets each container's new limit through the engine
adapter (the container that triggered the run first, the others in parallel);
``give_back``/``restore_all`` put the original settings back.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from flowcon.agent.counters import AgentCounters
from flowcon.agent.monitor import ContainerMonitor
from flowcon.config import Config
from flowcon.core.algorithm1 import Decision, algorithm1
from flowcon.core.backoff import Itval
from flowcon.core.labels import Policy
from flowcon.core.limits import CpuLimit, to_cpus
from flowcon.core.lists import ListName
from flowcon.engine.docker_engine import ContainerGone, CpuSettings, EngineError
from flowcon.engine.protocol import Engine

log = logging.getLogger("flowcon.agent")
decisions_log = logging.getLogger("flowcon.agent.decision")


@dataclass
class Tracked:
    """A container in the worker pool: its monitor, list, limit and original settings."""

    monitor: ContainerMonitor
    managed: bool
    job: str | None
    list: ListName | None
    limit: float = 1.0
    applied_cpus: float | None = None
    original: CpuSettings | None = None
    fresh: bool = False
    view: dict[str, Any] = field(default_factory=dict)
    tracked_at: float = field(default_factory=time.monotonic)

    @property
    def name(self) -> str:
        return self.monitor.name

    @property
    def policy(self) -> Policy:
        return self.monitor.policy


def _fmt(x: float | None, digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


class Executor:
    def __init__(
        self,
        engine: Engine,
        config: Config,
        host_cpus: int,
        itval: Itval,
        threads: ThreadPoolExecutor,
        dry_run: bool = False,
        counters: AgentCounters | None = None,
    ) -> None:
        self.engine = engine
        self.counters = counters or AgentCounters()
        self.cfg = config
        self.host_cpus = host_cpus
        self.itval = itval
        self.threads = threads
        self.dry_run = dry_run

    def run(
        self, managed: dict[str, Tracked], trigger: str, priority: Iterable[str] = ()
    ) -> list[str]:
        """Algorithm 1 on ``managed``, applied; doubles itval when all are in CL.
        Returns the ids of containers that vanished meanwhile."""
        if not managed:
            return []
        lists = {cid: t.list for cid, t in managed.items() if t.list is not None}
        g = {cid: t.monitor.tracker.current() for cid, t in managed.items()}
        fresh = {cid for cid, t in managed.items() if t.fresh}
        limits = {cid: t.limit for cid, t in managed.items()}
        result = algorithm1(lists, g, limits, self.cfg.beta, self.cfg.alpha, fresh)
        for t in managed.values():
            t.fresh = False
        first = [c for c in priority if c in result.decisions]
        rest = [c for c in result.decisions if c not in first]

        def apply(cid: str) -> str | None:
            t = managed[cid]
            old_list, t.list = t.list, result.lists[cid]
            ok = self.apply(t, result.decisions[cid], g[cid], old_list, trigger)
            return None if ok else cid

        # The container that triggered the run is limited first; the others in parallel
        # (each update is a round trip to the engine).
        outcomes = [apply(cid) for cid in first] + list(self.threads.map(apply, rest))
        if result.all_completing:
            self.itval.double()
        return [cid for cid in outcomes if cid is not None]

    def _unchanged(self, t: Tracked, target: CpuLimit) -> bool:
        if t.applied_cpus is None:
            o = t.original or CpuSettings()
            return target.unlimited and o.nano_cpus == 0 and not o.quota_mode
        # Deadband: a change smaller than min_update_cpus is not worth an engine call,
        # except into or out of "unlimited".
        return abs(t.applied_cpus - target.cpus) < max(self.cfg.min_update_cpus, 1e-9) and (
            target.unlimited == (t.applied_cpus >= self.host_cpus)
        )

    def _set(self, t: Tracked, target: CpuLimit) -> str:
        if self._unchanged(t, target):
            return "unchanged"
        if self.dry_run:
            t.applied_cpus = target.cpus
            return "dry-run"
        try:
            self.engine.set_cpus(t.monitor.cid, target, t.original or CpuSettings())
        except ContainerGone:
            return "vanished"
        except EngineError as exc:
            log.warning("update of %s failed: %s", t.name, exc)
            self.counters.engine_error("update")
            return "failed"
        t.applied_cpus = target.cpus
        self.counters.cpu_update()
        return "updated"

    def apply(
        self, t: Tracked, dec: Decision, g: float, old_list: ListName | None, trigger: str
    ) -> bool:
        """Set one container's limit; False if the container vanished."""
        old = t.limit
        t.limit = dec.limit
        target = to_cpus(dec.limit, self.host_cpus, t.policy.cpus_min, t.policy.cpus_max)
        outcome = self._set(t, target)
        decisions_log.info(
            "decision container=%s id=%s list=%s->%s old=%s new=%s cpus=%s g=%s reason=%s "
            "trigger=%s outcome=%s",
            t.name,
            t.monitor.cid[:12],
            old_list.value if old_list else "-",
            t.list.value if t.list else "-",
            _fmt(old),
            _fmt(dec.limit),
            f"{target.cpus:g}" + ("(unlimited)" if target.unlimited else ""),
            _fmt(g),
            json.dumps(dec.reason),
            trigger,
            outcome,
        )
        return outcome != "vanished"

    def give_back(self, cid: str, t: Tracked) -> None:
        """A finished container's original settings, if we changed them (best effort)."""
        if t.applied_cpus is None or self.dry_run:
            return
        try:
            self.engine.restore_cpus(cid, t.original or CpuSettings(), self.host_cpus)
        except EngineError as exc:  # removed (--rm) or engine gone: nothing to give back
            log.debug("restore of finished %s skipped: %s", t.name, exc)

    def restore_all(self, tracked: dict[str, Tracked]) -> int:
        """Give every managed container still present its original CPU settings; one
        that is gone leaves ``tracked``. Returns how many were restored."""
        restored = 0
        for cid, t in list(tracked.items()):
            if not t.managed or t.applied_cpus is None:
                continue
            if self.dry_run:
                t.applied_cpus = None
                continue
            try:
                self.engine.restore_cpus(cid, t.original or CpuSettings(), self.host_cpus)
                t.applied_cpus = None
                restored += 1
                log.info("restored container=%s original=%s", t.name, t.original)
            except ContainerGone:
                tracked.pop(cid, None)
            except EngineError as exc:
                self.counters.engine_error("restore")
                log.error("restore of %s failed: %s (state keeps its originals)", t.name, exc)
        return restored
