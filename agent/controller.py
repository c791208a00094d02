"""The Executor (paper section 3.2.3): measure, run Algorithm 1, apply the limits.

All entry points (the periodic round, the listeners' start/finish, a resync after
the engine came back) take one lock, so the lists change in one place at a time.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from flowcon.agent.monitor import ContainerMonitor
from flowcon.agent.state import AgentState, ContainerRecord, StateStore

from flowcon.config import Config
from flowcon.core.algorithm1 import Decision, algorithm1
from flowcon.core.algorithm2 import pool_change
from flowcon.core.backoff import Itval
from flowcon.core.growth import GrowthTracker
from flowcon.core.labels import LabelError, Policy, parse_policy
from flowcon.core.limits import NANO, CpuLimit, to_cpus
from flowcon.core.lists import ListName
from flowcon.engine.docker_engine import (
    ContainerGone,
    ContainerInfo,
    CpuSettings,
    DockerEngine,
    EngineError,
    EngineUnavailable,
    Stats,
)

log = logging.getLogger("flowcon.agent")
decisions_log = logging.getLogger("flowcon.agent.decision")

DEFAULT_PERIOD = 100_000  # µs, the kernel's default CFS period


@dataclass
class Tracked:
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


class Controller:
    def __init__(
        self,
        engine: DockerEngine,
        config: Config,
        host_cpus: int,
        store: StateStore | None = None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.engine = engine
        self.cfg = config
        self.host_cpus = host_cpus
        self.store = store
        self.dry_run = dry_run
        self.clock = clock
        self.lock = threading.RLock()
        self.tracked: dict[str, Tracked] = {}
        self.itval = Itval(config.itval, config.itval_max)
        self.rounds = 0
        self.node = socket.gethostname()
        self._saved: AgentState = store.load() if store else AgentState()
        if self._saved.itval:
            self.itval.value = min(max(self._saved.itval, config.itval), config.itval_max)
        self.rounds = self._saved.rounds
        self._bad_labels: set[str] = set()
        # Containers whose die event we saw: a racy list of running containers must not
        # bring them back (their current settings are our limits, not their originals).
        self._finished: set[str] = set()
        self._engine_down = False
        # The engine answers a stats call on its next one-second tick: ask in parallel.
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="flowcon-measure")
        # Hooks set by the daemon.
        self.on_itval: Callable[[float], None] = lambda _v: None
        self.after_round: Callable[[list[dict[str, Any]]], None] = lambda _views: None

    # ----- container set (Algorithm 2) -------------------------------------------------

    def _policy(self, info: ContainerInfo) -> Policy | None:
        for key, value in self.cfg.match_labels.items():
            if info.labels.get(key) != value:
                return None
        try:
            return parse_policy(info.labels)
        except LabelError as exc:
            if info.id not in self._bad_labels:
                self._bad_labels.add(info.id)
                log.warning("skipping container=%s id=%s: %s", info.name, info.id[:12], exc)
            return None

    def _track(self, info: ContainerInfo, policy: Policy) -> Tracked | None:
        if info.cpu is None:
            info = self.engine.inspect(info.id)
            if not info.running:
                return None
        saved = self._saved.containers.get(info.id)
        tracker = GrowthTracker(self.cfg.reference_intervals, self.cfg.min_cpu_share)
        mon = ContainerMonitor(
            info.id,
            info.name,
            policy,
            tracker,
            self.host_cpus,
            max_line_bytes=self.cfg.max_line_bytes,
            log_tail=self.cfg.log_tail,
            history_len=self.cfg.history,
            cgroup_parent=info.cgroup_parent,
            pid=info.pid,
            use_cgroup=self.cfg.cpu_source == "auto",
            io_interval=self.cfg.io_stats_interval,
        )
        t = Tracked(mon, policy.managed, policy.job, ListName.NL if policy.managed else None)
        if saved is not None and saved.managed == policy.managed:
            # Resume: same lists, and above all the same originals (never our own limits).
            t.list = ListName(saved.list) if saved.list and policy.managed else t.list
            t.limit = saved.limit
            t.applied_cpus = saved.applied_cpus
            t.original = CpuSettings(**saved.original) if saved.original else None
            g = saved.growth or {}
            lp = g.get("last_point")
            tracker.last_point = (float(lp[0]), float(lp[1])) if lp else None
            tracker.reference = float(g.get("reference") or 0.0)
            tracker.intervals = int(g.get("intervals") or 0)
            tracker.g = g.get("g")
            mon.log_since_ns = saved.log_since_ns
            log.info("resumed container=%s list=%s limit=%.3f", info.name, t.list, t.limit)
        if policy.managed and t.original is None:
            t.original = info.cpu
        self.tracked[info.id] = t
        return t

    def _release(self, cid: str, why: str) -> None:
        """Finished container: leave its list, give back its original settings (line 15)."""
        t = self.tracked.pop(cid, None)
        self._saved.containers.pop(cid, None)
        self.engine.forget(cid)
        if t is None or not t.managed:
            return
        log.info("released container=%s id=%s reason=%s", t.name, cid[:12], why)
        if t.applied_cpus is not None and not self.dry_run:
            try:
                self.engine.update_cpu(cid, self._restore_body(t))
            except EngineError as exc:  # removed (--rm) or engine gone: nothing to give back
                log.debug("restore of finished %s skipped: %s", t.name, exc)

    def _present(self) -> dict[str, ContainerInfo]:
        return {c.id: c for c in self.engine.list_running()}

    def resync(self, trigger: str = "resync") -> bool:
        """Compare the running containers with the lists; new -> NL, gone -> released.
        Runs Algorithm 1 at once (and resets itval) if the managed set changed."""
        with self.lock:
            try:
                present = self._present()
            except EngineError as exc:
                log.warning("resync failed: %s", exc)
                return False
            return self._sync(present, trigger)

    def _sync(
        self, present: dict[str, ContainerInfo], trigger: str, listed_at: float | None = None
    ) -> bool:
        """Returns True if the managed set changed (and Algorithm 1 ran).

        ``listed_at``: when ``present`` was listed, if that was outside the lock; a
        container a listener tracked since then is not "gone", just newer than the list.
        """
        wanted: dict[str, Policy] = {}
        self._finished.intersection_update(present)  # bounded: only ids still listed
        for cid, info in present.items():
            if cid in self._finished:
                continue
            policy = self._policy(info)
            if policy is not None and policy.monitored:
                wanted[cid] = policy
        change = pool_change(set(self.tracked), set(wanted))
        managed_changed = False
        for cid in change.finished:
            if listed_at is not None and self.tracked[cid].tracked_at >= listed_at:
                continue
            managed_changed |= self.tracked[cid].managed
            self._release(cid, "gone")
        for cid in change.new:
            try:
                t = self._track(present[cid], wanted[cid])
            except ContainerGone:
                continue
            except EngineError as exc:
                log.warning("cannot track %s: %s", present[cid].name, exc)
                continue
            if t is None:
                continue
            managed_changed |= t.managed
            log.info("new container=%s id=%s list=%s job=%s", t.name, cid[:12], t.list, t.job)
        if managed_changed:
            self._listener_run(trigger, priority=change.new)
        elif change.changed:
            self._save()
        return managed_changed

    def on_start(self, cid: str) -> None:
        """New Cons listener: the container joins NL, itval resets, Algorithm 1 runs now."""
        with self.lock:
            self._finished.discard(cid)
            if cid in self.tracked:
                return
            try:
                info = self.engine.inspect(cid)
            except EngineError as exc:
                log.info("started container %s not inspected: %s", cid[:12], exc)
                return
            if not info.running:
                return
            policy = self._policy(info)
            if policy is None or not policy.monitored:
                return
            t = self._track(info, policy)
            if t is None:
                return
            log.info("new container=%s id=%s list=%s job=%s", t.name, cid[:12], t.list, t.job)
            if t.managed:
                self._listener_run("start", priority=[cid])
            else:
                self._save()

    def on_finish(self, cid: str) -> None:
        """Finished Cons listener: leave the lists, release, itval resets, Algorithm 1 runs."""
        with self.lock:
            t = self.tracked.get(cid)
            if t is None:
                return
            self._finished.add(cid)
            self._release(cid, "finished")
            if t.managed:
                self._listener_run("finish")
            else:
                self._save()

    def _listener_run(self, trigger: str, priority: Iterable[str] = ()) -> None:
        self.itval.reset()
        self._algorithm1(trigger, priority)
        self.on_itval(self.itval.value)
        self._save()

    # ----- Algorithm 1 -----------------------------------------------------------------

    def _managed(self) -> dict[str, Tracked]:
        return {cid: t for cid, t in self.tracked.items() if t.managed and t.list is not None}

    def _algorithm1(self, trigger: str, priority: Iterable[str] = ()) -> bool:
        """Run Algorithm 1 on the managed containers and apply it. Returns True if itval doubled."""
        managed = self._managed()
        if not managed:
            return False
        lists = {cid: t.list for cid, t in managed.items() if t.list is not None}
        g = {cid: t.monitor.tracker.current() for cid, t in managed.items()}
        fresh = {cid for cid, t in managed.items() if t.fresh}
        limits = {cid: t.limit for cid, t in managed.items()}
        result = algorithm1(lists, g, limits, self.cfg.beta, self.cfg.alpha, fresh)
        for cid in managed:
            managed[cid].fresh = False
        first = [c for c in priority if c in result.decisions]
        rest = [c for c in result.decisions if c not in first]

        def apply(cid: str) -> str | None:
            t = managed[cid]
            old_list, t.list = t.list, result.lists[cid]
            ok = self._apply(t, result.decisions[cid], g[cid], old_list, trigger)
            return None if ok else cid

        # The container that triggered the run is limited first; the others in parallel
        # (each update is a round trip to the engine).
        outcomes = [apply(cid) for cid in first] + list(self._pool.map(apply, rest))
        vanished = [cid for cid in outcomes if cid is not None]
        doubled = False
        if result.all_completing:
            self.itval.double()
            doubled = True
        for cid in vanished:
            self._release(cid, "vanished")
        if vanished and self._managed():
            self.itval.reset()
            doubled = False
            self._algorithm1("vanished")
        return doubled

    def _nano_body(self, t: Tracked, target: CpuLimit) -> dict[str, int]:
        orig = t.original or CpuSettings()
        if orig.quota_mode:
            period = orig.cpu_period or DEFAULT_PERIOD
            quota = -1 if target.unlimited else max(1000, int(target.cpus * period))
            return {"CpuPeriod": period, "CpuQuota": quota}
        return {"NanoCpus": target.nano_cpus}

    def _restore_body(self, t: Tracked) -> dict[str, int]:
        orig = t.original or CpuSettings()
        body: dict[str, int]
        if orig.quota_mode:
            body = {
                "CpuPeriod": orig.cpu_period or DEFAULT_PERIOD,
                "CpuQuota": orig.cpu_quota if orig.cpu_quota > 0 else -1,
            }
        else:
            # The engine ignores NanoCpus=0, so "no limit" goes back as the whole host.
            body = {"NanoCpus": orig.nano_cpus or self.host_cpus * NANO}
        if orig.cpu_shares:
            body["CpuShares"] = orig.cpu_shares
        return body

    def _unlimited_originally(self, t: Tracked) -> bool:
        o = t.original or CpuSettings()
        return o.nano_cpus == 0 and not o.quota_mode

    def _apply(
        self, t: Tracked, dec: Decision, g: float, old_list: ListName | None, trigger: str
    ) -> bool:
        """Set one container's limit; False if the container vanished."""
        old = t.limit
        t.limit = dec.limit
        target = to_cpus(dec.limit, self.host_cpus, t.policy.cpus_min, t.policy.cpus_max)
        if t.applied_cpus is None:
            same = target.unlimited and self._unlimited_originally(t)
        else:
            # Deadband: a change smaller than min_update_cpus is not worth an engine call,
            # except into or out of "unlimited".
            same = abs(t.applied_cpus - target.cpus) < max(self.cfg.min_update_cpus, 1e-9) and (
                target.unlimited == (t.applied_cpus >= self.host_cpus)
            )
        if same:
            outcome = "unchanged"
        elif self.dry_run:
            outcome = "dry-run"
            t.applied_cpus = target.cpus
        else:
            try:
                self.engine.update_cpu(t.monitor.cid, self._nano_body(t, target))
                t.applied_cpus = target.cpus
                outcome = "updated"
            except ContainerGone:
                outcome = "vanished"
            except EngineError as exc:
                outcome = "failed"
                log.warning("update of %s failed: %s", t.name, exc)
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

    # ----- the periodic round ----------------------------------------------------------

    def _measure(
        self, t: Tracked, now: float, stats: Stats | None = None
    ) -> tuple[Tracked, float | None, str | None]:
        try:
            return t, t.monitor.measure(self.engine, now, stats), None
        except ContainerGone:
            return t, None, None
        except EngineError as exc:
            return t, None, str(exc)

    def _engine_stats(self, t: Tracked) -> tuple[str, Stats | None]:
        try:
            return t.monitor.cid, self.engine.stats(t.monitor.cid)
        except EngineError:  # measured again (and reported) by _measure
            return t.monitor.cid, None

    def round(self) -> None:
        """Measure every tracked container, then run Algorithm 1 (the interval job).

        Measuring happens outside the lock (the engine's stats take about a second), so a
        listener's start/finish is handled at once even while a round measures.
        """
        listed_at = time.monotonic()
        try:
            present = self._present()
        except EngineUnavailable as exc:
            if not self._engine_down:
                log.warning("round skipped, engine unavailable: %s", exc)
            self._engine_down = True
            return
        except EngineError as exc:
            log.warning("round skipped: %s", exc)
            return
        if self._engine_down:
            log.info("engine answers again")
            self._engine_down = False
        with self.lock:
            todo = [t for cid, t in self.tracked.items() if cid in present]
        now = self.clock()
        # The engine's stats (each waits for its one-second tick) are fetched in parallel,
        # and only where the cgroup files do not suffice; the rest is cheap and runs here,
        # serially: a third less CPU than spreading it over threads.
        mono = time.monotonic()
        need = [t for t in todo if t.monitor.needs_engine_stats(mono)]
        stats = dict(self._pool.map(self._engine_stats, need)) if need else {}
        results = [self._measure(t, now, stats.get(t.monitor.cid)) for t in todo]
        with self.lock:
            for t, g, err in results:
                if err:
                    log.warning("measuring %s failed: %s", t.name, err)
                t.fresh = g is not None
            self.rounds += 1
            # Containers the listeners missed (Algorithm 2 by polling): if the managed set
            # changed, _sync already ran Algorithm 1 with this round's fresh G.
            if not self._sync(present, "round", listed_at):
                before = self.itval.value
                self._algorithm1("round")
                if self.itval.value != before:
                    log.info("itval %gs -> %gs (all containers in CL)", before, self.itval.value)
                    self.on_itval(self.itval.value)
            self._save()
            views = self.views()
        self.after_round(views)

    # ----- restore, state, views -------------------------------------------------------

    def restore_all(self) -> int:
        """Give every managed container still present its original CPU settings."""
        restored = 0
        with self.lock:
            for cid, t in list(self.tracked.items()):
                if not t.managed or t.applied_cpus is None:
                    continue
                if self.dry_run:
                    t.applied_cpus = None
                    continue
                try:
                    self.engine.update_cpu(cid, self._restore_body(t))
                    t.applied_cpus = None
                    restored += 1
                    log.info("restored container=%s original=%s", t.name, t.original)
                except ContainerGone:
                    self.tracked.pop(cid, None)
                except EngineError as exc:
                    log.error("restore of %s failed: %s (state keeps its originals)", t.name, exc)
            self._save()
        return restored

    def _record(self, cid: str, t: Tracked) -> ContainerRecord:
        tr = t.monitor.tracker
        return ContainerRecord(
            id=cid,
            name=t.name,
            managed=t.managed,
            job=t.job,
            list=t.list.value if t.list else None,
            limit=t.limit,
            applied_cpus=t.applied_cpus,
            original=t.original.to_dict() if t.original else None,
            growth={
                "last_point": list(tr.last_point) if tr.last_point else None,
                "reference": tr.reference,
                "intervals": tr.intervals,
                "g": tr.g,
            },
            log_since_ns=t.monitor.log_since_ns,
            view=self._view(cid, t),
        )

    def _save(self) -> None:
        if self.store is None:
            return
        state = AgentState(
            itval=self.itval.value,
            rounds=self.rounds,
            node=self.node,
            host_cpus=self.host_cpus,
            containers={cid: self._record(cid, t) for cid, t in self.tracked.items()},
        )
        # Keep records of managed containers we have not seen again yet (engine down).
        for cid, rec in self._saved.containers.items():
            state.containers.setdefault(cid, rec)
        try:
            self.store.save(state)
        except (OSError, ValueError) as exc:
            log.error("cannot write state file %s: %s", self.store.path, exc)

    def _view(self, cid: str, t: Tracked) -> dict[str, Any]:
        m = t.monitor
        p, u = m.progress, m.usage

        def finite(x: float | None) -> float | None:
            return x if x is not None and math.isfinite(x) else None

        return {
            "container_id": cid,
            "name": t.name,
            "managed": t.managed,
            "job": t.job,
            "list": t.list.value if t.list else None,
            "g": finite(m.tracker.g),
            "limit": t.limit if t.managed else None,
            "cpus": t.applied_cpus,
            "cpu_share": finite(u.cpu_share),
            "mem_bytes": u.mem_bytes,
            "blk_read": u.blk_read,
            "blk_write": u.blk_write,
            "net_rx": u.net_rx,
            "net_tx": u.net_tx,
            "metric": t.policy.metric,
            "value": finite(p.value),
            "step": p.step,
            "iterations_per_second": finite(p.steps_per_s),
            "ts": p.value_ts or p.step_ts,
            "step_ts": p.step_ts,
        }

    def views(self) -> list[dict[str, Any]]:
        with self.lock:
            return [self._view(cid, t) for cid, t in self.tracked.items()]
