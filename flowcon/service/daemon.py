"""The allocator daemon: HTTP API + planning loop + executor, around one SQLite store.

Threads: the HTTP server handles requests (submit/cancel/measurements go through the
planner under one lock); the planning loop wakes every slot, or at once when a submit,
cancel, completion or a refined curve asks for it, and makes the executor's containers
match the stored plan. The store is written before containers are touched, so a crash
between the two is repaired by the next round (the executor's state is compared with the
store every round, not patched incrementally).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from flowcon.service.api import ApiError, ApiServer
from flowcon.service.config import AllocatorConfig, ensure_token
from flowcon.service.jobspec import JobSpecError, parse_jobspec
from flowcon.service.metrics import AllocatorMetrics
from flowcon.service.planner import Plan, PlanError, Planner
from flowcon.service.store import SCHEMA_VERSION, Store
from flowcon.service.target import ExecutorTarget, build_placer, build_target

log = logging.getLogger(__name__)


class Allocator:
    """The service behind the HTTP API (``flowcon.service.api.Service``)."""

    def __init__(
        self,
        cfg: AllocatorConfig,
        target: ExecutorTarget | None = None,
        total_gpus: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.cfg = cfg
        self.clock = clock
        self.store = Store(cfg.db_path)
        self.token = ensure_token(cfg)
        self.target = target
        inventory = target.inventory if target is not None else None
        if total_gpus is None:
            if inventory is None:
                raise ValueError("need an executor target (GPU inventory) or total_gpus")
            total_gpus = inventory.total_gpus
        if total_gpus < 1:
            raise ValueError("the GPU inventory is empty: declare gpus.declared in the config")
        self.total_gpus = total_gpus
        self.planner = Planner(
            self.store,
            total_gpus,
            cfg.slot_seconds,
            placer=build_placer(inventory) if inventory is not None else None,
            ewma_alpha=cfg.ewma_alpha,
            min_measurements=cfg.min_measurements,
            complete_on_progress=target is None,
            clock=clock,
        )
        for e in self.store.events(kind="restarted_on_new_gpus")[-20:]:
            # the restart cost measured before a daemon restart still holds
            self.planner.observe_overhead(
                float(e.data.get("stop_seconds", 0)) + float(e.data.get("start_seconds", 0))
            )
        self.metrics = AllocatorMetrics(self.store, total_gpus)
        # one planning round at a time; HTTP calls only touch the store (its own lock)
        # and wake the loop, so a slow container stop never blocks a submit
        self._lock = threading.RLock()
        self.poll_seconds = min(2.0, cfg.slot_seconds / 4)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self.server: ApiServer | None = None
        self.rounds = 0
        self.last_round_error: str | None = None

    # -- lifecycle ---------------------------------------------------------------------

    def start(self, host: str | None = None, port: int | None = None) -> None:
        self.store.append_event(
            "allocator_started",
            None,
            total_gpus=self.total_gpus,
            slot=self.cfg.slot_seconds,
            executor=self.target.kind if self.target else "none",
        )
        with self._lock:
            if self.target is not None:
                self.target.reconcile_on_start(self.store, self.planner)
            self._round()
        self.server = ApiServer(
            self,
            self.token,
            host=host or self.cfg.host,
            port=self.cfg.port if port is None else port,
        )
        self.server.start()
        self._loop = threading.Thread(target=self._run, name="allocator-plan", daemon=True)
        self._loop.start()
        log.info(
            "allocator on %s: %d GPUs, slot %.0f s, db %s",
            self.server.url,
            self.total_gpus,
            self.cfg.slot_seconds,
            self.cfg.db_path,
        )

    @property
    def url(self) -> str:
        assert self.server is not None
        return self.server.url

    def stop(self, stop_jobs: bool = False) -> None:
        """Stop serving. Job containers keep running (a restart adopts them) unless
        ``stop_jobs``."""
        self._stop.set()
        self._wake.set()
        if self.server is not None:
            self.server.stop()
        if self._loop is not None:
            self._loop.join(timeout=30)
        if self.target is not None:
            if stop_jobs:
                for rec in self.store.active_jobs():
                    self.target.stop_job(rec.name)
            self.target.close()
        self.store.append_event("allocator_stopped", None, stop_jobs=stop_jobs)
        self.store.close()

    def wake(self) -> None:
        self._wake.set()

    def _run(self) -> None:
        """Poll the executor every few seconds (completions, dead workers, progress); plan
        every slot, or at once when woken or when a job ended."""
        next_plan = time.monotonic() + self.cfg.slot_seconds
        while not self._stop.is_set():
            timeout = max(0.0, min(self.poll_seconds, next_plan - time.monotonic()))
            woken = self._wake.wait(timeout=timeout)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                with self._lock:
                    ended = self._poll()
                    if woken or ended or time.monotonic() >= next_plan:
                        self._round(polled=True, force=woken or bool(ended))
                        next_plan = time.monotonic() + self.cfg.slot_seconds
                self.last_round_error = None
            except Exception as exc:  # keep planning; the next round retries
                self.last_round_error = str(exc)
                log.exception("planning round failed")

    def _poll(self) -> list[str]:
        """Jobs that ended (completed or failed for good) since the last poll; progress of
        running jobs from their own metric lines."""
        if self.target is None:
            return []
        now = self.clock()
        ended = []
        for name, state, reason in self.target.poll(self.store):
            at = None
            rec = self.store.get_job(name)
            seen = self.target.progress(name) if state == "completed" else None
            if seen is not None and rec is not None and seen[0] >= rec.iterations:
                at = seen[1]  # the job's own "last iteration done" line
            self.planner.finish(name, state, reason, now, at=at)
            log.info("job %s %s: %s", name, state, reason)
            ended.append(name)
        for rec in self.store.active_jobs():
            if rec.gpus > 0:
                seen = self.target.progress(rec.name)
                if seen is not None:
                    self.planner.observe_progress(rec.name, *seen)
        return ended

    def _round(self, polled: bool = False, force: bool = True) -> Plan:
        """One slot: collect finished/dead jobs, re-plan, make containers match."""
        t0 = time.perf_counter()
        if not polled:
            self._poll()
        plan = self.planner.plan(self.clock(), force=force)
        if self.target is not None:
            self.target.apply(self.store, self.planner)
        self.rounds += 1
        self.metrics.observe_round(time.perf_counter() - t0)
        return plan

    # -- Service (HTTP) ----------------------------------------------------------------

    def health(self) -> dict[str, Any]:
        return {
            "status": "ok" if self.last_round_error is None else "degraded",
            "schema_version": SCHEMA_VERSION,
            "total_gpus": self.total_gpus,
            "slot_seconds": self.cfg.slot_seconds,
            "executor": self.target.kind if self.target else "none",
            "rounds": self.rounds,
            "last_round_error": self.last_round_error,
        }

    def metrics_text(self) -> bytes:
        return self.metrics.render()

    def list_jobs(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.store.list_jobs()]

    def get_job(self, name: str) -> dict[str, Any]:
        rec = self.store.get_job(name)
        if rec is None:
            raise ApiError(404, f"no job {name!r}")
        out = rec.to_json()
        out["curve"] = {str(g): v for g, v in self.planner.curve(rec).points.items()}
        out["admissions"] = self.store.admissions(name)
        out["events"] = [e.to_json() for e in self.store.events(job=name)]
        out["containers"] = sorted(self.planner.containers.get(name, set()))
        return out

    def submit(self, spec: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        now = self.clock()
        try:
            parsed = parse_jobspec(spec, now=now)
        except JobSpecError as exc:
            raise ApiError(400, exc.message, field=exc.field) from None
        try:
            result = self.planner.submit(parsed, now)
        except PlanError as exc:
            raise ApiError(exc.status, str(exc)) from None
        self.metrics.admission(result.admitted)
        if result.admitted:
            self.wake()  # start its containers now, not at the next slot
        return (201 if result.admitted else 200), result.to_json()

    def cancel(self, name: str) -> dict[str, Any]:
        try:
            rec = self.planner.cancel(name, self.clock())
        except PlanError as exc:
            raise ApiError(exc.status, str(exc)) from None
        self.wake()
        return rec.to_json()

    def ingest_measurements(self, body: Mapping[str, Any]) -> dict[str, Any]:
        node = body.get("node")
        items = body.get("measurements")
        if not isinstance(node, str) or not node:
            raise ApiError(400, "'node' must be a non-empty string", field="node")
        if not isinstance(items, list):
            raise ApiError(400, "'measurements' must be a list", field="measurements")
        counts: dict[str, int] = {}
        replan = False
        now = self.clock()
        for m in items:
            if not isinstance(m, Mapping):
                outcome = "skipped: not an object"
            else:
                try:
                    outcome = self.planner.ingest(node, m, now)
                except Exception as exc:  # one bad row must not lose the others
                    log.warning("measurement from %s skipped: %s", node, exc)
                    outcome = "skipped: error"
            key = outcome.split(":")[0]
            counts[key] = counts.get(key, 0) + 1
            self.metrics.measurement(key)
            replan = replan or outcome == "refined"
        if replan:
            self.wake()
        return {"node": node, "received": len(items), **counts, "replan": replan}


def run_daemon(cfg: AllocatorConfig) -> None:
    """``flowcon allocator``: run until SIGINT/SIGTERM."""
    target = build_target(cfg)
    alloc = Allocator(cfg, target)
    done = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        done.set()

    signal.signal(signal.SIGINT, _stop)
    signal.signal(signal.SIGTERM, _stop)
    alloc.start()
    print(f"flowcon allocator listening on {alloc.url} (token file {cfg.token_path})", flush=True)
    try:
        while not done.wait(1.0):
            pass
    finally:
        log.info("stopping allocator")
        alloc.stop()
