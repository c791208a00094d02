"""The agent's round loop: the container monitor measures, the worker pool follows the
engine's containers (Algorithm 2), the executor runs and applies Algorithm 1.

Roles (paper section 3.2): ``monitor.py`` (container monitor), ``pool.py`` (worker
pool), ``executor.py`` (executor). All entry points here (the periodic round, the
listeners' start/finish, a resync after the engine came back) take one lock, so the
lists change in one place at a time.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from flowcon.agent.config import Config
from flowcon.agent.counters import AgentCounters
from flowcon.agent.gpu_share import GpuShares
from flowcon.agent.limit_executor import Executor, Tracked
from flowcon.agent.pool import WorkerPool, container_record, container_view
from flowcon.agent.state_file import AgentState, StateStore
from flowcon.core.backoff import Itval
from flowcon.core.gpu_usage import GpuSample
from flowcon.engine.docker_engine import (
    ContainerGone,
    ContainerInfo,
    EngineError,
    EngineUnavailable,
    Stats,
)
from flowcon.engine.protocol import Engine

log = logging.getLogger("flowcon.agent")


class GpuSource(Protocol):
    """One NVML sample of the host's GPUs per round (``flowcon.engine.gpus.GpuSampler``)."""

    @property
    def count(self) -> int: ...

    def sample(self) -> GpuSample | None: ...


# a container's PIDs (id, cgroup parent, init pid) -> the PIDs in its cgroup, or None
PidsOf = Callable[[str, str, int], "set[int] | None"]


class Controller:
    def __init__(
        self,
        engine: Engine,
        config: Config,
        host_cpus: int,
        store: StateStore | None = None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        gpus: GpuSource | None = None,
        pids_of: PidsOf | None = None,
        gpu_shares: GpuShares | None = None,
    ) -> None:
        self.engine = engine
        # GPU measurement: both or neither (the daemon passes NVML and the cgroup PIDs)
        self.gpus = gpus if pids_of is not None else None
        self.pids_of = pids_of
        self.gpu_shares = gpu_shares  # MPS shares of containers that share a GPU
        self.cfg = config
        self.host_cpus = host_cpus
        self.store = store
        self.dry_run = dry_run
        self.clock = clock
        self.lock = threading.RLock()
        self.itval = Itval(config.itval, config.itval_max)
        self.node = socket.gethostname()
        saved: AgentState = store.load() if store else AgentState()
        if saved.itval:
            self.itval.value = min(max(saved.itval, config.itval), config.itval_max)
        self.rounds = saved.rounds
        self._engine_down = False
        self.skipped: str | None = None  # why the last round did not run (None: it ran)
        # The engine answers a stats call on its next one-second tick: ask in parallel.
        self._threads = ThreadPoolExecutor(max_workers=32, thread_name_prefix="flowcon-measure")
        self.counters = AgentCounters()
        self.executor = Executor(
            engine, config, host_cpus, self.itval, self._threads, dry_run, self.counters
        )
        self.pool = WorkerPool(engine, config, host_cpus, self.executor, saved)
        self.executor.before_updates = self._save  # write-ahead of each round's updates
        # Hooks set by the daemon.
        self.on_itval: Callable[[float], None] = lambda _v: None
        self.after_round: Callable[[list[dict[str, Any]]], None] = lambda _views: None
        # the engine answered (None) or not (the error) when listing containers (/healthz)
        self.on_engine: Callable[[str | None], None] = lambda _error: None

    @property
    def tracked(self) -> dict[str, Tracked]:
        return self.pool.tracked

    # ----- Algorithm 2: the listeners and resync ----------------------------------------

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
        """Returns True if the managed set changed (and Algorithm 1 ran)."""
        result = self.pool.sync(present, listed_at)
        if result.managed_changed:
            self._listener_run(trigger, priority=result.new)
        elif result.changed:
            self._save()
        return result.managed_changed

    def on_start(self, cid: str) -> None:
        """New Cons listener: the container joins NL, itval resets, Algorithm 1 runs now."""
        with self.lock:
            t = self.pool.started(cid)
            if t is None:
                return
            if t.managed:
                self._listener_run("start", priority=[cid])
            else:
                self._save()

    def on_finish(self, cid: str) -> None:
        """Finished Cons listener: leave the lists, release, itval resets, Algorithm 1 runs."""
        with self.lock:
            t = self.pool.finished(cid)
            if t is None:
                return
            if t.managed:
                self._listener_run("finish")
            else:
                self._save()

    def on_update(self, cid: str, time_ns: int | None = None) -> None:
        """The engine updated a container (its ``update`` event, at ``time_ns``): if
        someone else changed a managed container's CPU settings, it is left alone from now
        on and Algorithm 1 runs again for the others (flowcon/agent/foreign.py)."""
        with self.lock:
            try:
                foreign = self.pool.updated(cid, time_ns)
            except ContainerGone:
                return  # removed meanwhile: the die/destroy event releases it
            except EngineError as exc:
                log.warning("checking the update of %s failed: %s", cid[:12], exc)
                return
            if foreign:
                self._listener_run("foreign")

    def _listener_run(self, trigger: str, priority: Iterable[str] = ()) -> None:
        self.itval.reset()
        self._algorithm1(trigger, priority)
        self.on_itval(self.itval.value)
        self._save()

    def _algorithm1(self, trigger: str, priority: Iterable[str] = ()) -> None:
        """Algorithm 1 on the managed containers; when one vanished meanwhile (it is
        released) or someone else changed one just before its update (handed off), the
        others get a fresh run (itval reset)."""
        outcome = self.executor.run(self.pool.managed(), trigger, priority)
        for cid in outcome.vanished:
            self.pool.release(cid, "vanished")
        if (outcome.vanished or outcome.handed_off) and self.pool.managed():
            self.itval.reset()
            self._algorithm1("vanished" if outcome.vanished else "foreign")

    # ----- the periodic round -----------------------------------------------------------

    def _measure(
        self, t: Tracked, now: float, stats: Stats | None = None, gpu: GpuSample | None = None
    ) -> tuple[Tracked, float | None, str | None]:
        look: tuple[GpuSample, set[int] | None] | None = None
        if gpu is not None and self.pids_of is not None:
            m = t.monitor
            look = (gpu, self.pids_of(m.cid, m.cgroup_parent, m.pid))
        try:
            return t, t.monitor.measure(self.engine, now, stats, look), None
        except ContainerGone:
            return t, None, None
        except EngineError as exc:
            self.counters.engine_error("measure")
            return t, None, str(exc)

    def _engine_stats(self, t: Tracked) -> tuple[str, Stats | None]:
        try:
            return t.monitor.cid, self.engine.stats(t.monitor.cid)
        except EngineError:  # measured again (and reported) by _measure
            return t.monitor.cid, None

    def _listing(self) -> dict[str, ContainerInfo] | None:
        """The running containers, or None (``skipped`` says why; logged once per
        reason while the engine is down or refuses, not every round)."""
        try:
            present = self._present()
        except EngineError as exc:
            down = isinstance(exc, EngineUnavailable)
            if (down and not self._engine_down) or (not down and str(exc) != self.skipped):
                log.warning("round skipped: %s", exc)
            self._engine_down = down
            self.skipped = str(exc)
            self.counters.engine_error("list")
            self.on_engine(str(exc))
            return None
        self.on_engine(None)
        if self._engine_down:
            log.info("engine answers again")
            self._engine_down = False
        self.skipped = None
        return present

    def round(self) -> bool:
        """Measure every tracked container, then run Algorithm 1 (the interval job).
        False when the round could not run (the engine did not list its containers).

        Measuring happens outside the lock (the engine's stats take about a second), so a
        listener's start/finish is handled at once even while a round measures.
        """
        listed_at = time.monotonic()
        present = self._listing()
        if present is None:
            return False
        with self.lock:
            todo = [t for cid, t in self.tracked.items() if cid in present]
        now = self.clock()
        # The engine's stats (each waits for its one-second tick) are fetched in parallel,
        # and only where the cgroup files do not suffice; the rest is cheap and runs here,
        # serially: a third less CPU than spreading it over threads.
        mono = time.monotonic()
        need = [t for t in todo if t.monitor.needs_engine_stats(mono)]
        stats = dict(self._threads.map(self._engine_stats, need)) if need else {}
        gpu = self.gpus.sample() if self.gpus is not None and todo else None
        results = [self._measure(t, now, stats.get(t.monitor.cid), gpu) for t in todo]
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
            if self.gpu_shares is not None:  # the same lists, applied at a restart
                self.gpu_shares.round(self.pool.managed(), self.itval.value, self.dry_run)
            self._save()
            views = self.views()
        self.after_round(views)
        return True

    # ----- restore, state, views --------------------------------------------------------

    def restore_all(self) -> int:
        """Give every managed container still present its original CPU settings."""
        with self.lock:
            restored = self.executor.restore_all(self.tracked)
            self._save()
        return restored

    def _save(self) -> None:
        if self.store is None:
            return
        state = AgentState(
            itval=self.itval.value,
            rounds=self.rounds,
            node=self.node,
            host_cpus=self.host_cpus,
            containers={cid: container_record(cid, t) for cid, t in self.tracked.items()},
            label_errors={
                cid: {"name": name, "error": err}
                for cid, (name, err) in self.pool.label_errors.items()
            },
        )
        # Keep records of managed containers we have not seen again yet (engine down).
        for cid, rec in self.pool.saved.containers.items():
            state.containers.setdefault(cid, rec)
        try:
            self.store.save(state)
        except (OSError, ValueError) as exc:
            log.error("cannot write state file %s: %s", self.store.path, exc)

    def views(self) -> list[dict[str, Any]]:
        with self.lock:
            return [container_view(cid, t) for cid, t in self.tracked.items()]
