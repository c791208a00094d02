"""Wire the agent together: engine, controller, listeners, scheduler, exporters, signals."""

from __future__ import annotations

import logging
import signal
import threading
from datetime import datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from flowcon.agent.controller import Controller
from flowcon.agent.exporter import Exporter
from flowcon.agent.reporter import AllocatorReporter
from flowcon.agent.state import StateStore
from flowcon.agent.webview import AgentWeb
from flowcon.config import Config
from flowcon.engine.docker_engine import DockerEngine
from flowcon.engine.host import host_capacity
from flowcon.listeners.events import EventListener
from flowcon.web.health import Liveness
from flowcon.web.history import History
from flowcon.web.server import HttpServer

log = logging.getLogger("flowcon.agent")

JOB_ID = "algorithm1"


class Agent:
    def __init__(self, config: Config, dry_run: bool = False) -> None:
        self.cfg = config
        self.dry_run = dry_run or config.dry_run
        self.engine = DockerEngine(
            config.docker_host,
            cgroup_root=config.cgroup_root if config.cpu_source == "auto" else None,
        )
        self.host = host_capacity()
        cpus = self.host.cpus
        try:
            engine_cpus = self.engine.ncpu()
            if engine_cpus and engine_cpus != cpus:
                log.warning(
                    "engine reports %d CPUs, psutil %d: using the engine's", engine_cpus, cpus
                )
                cpus = engine_cpus
        except Exception as exc:  # the engine may come up later
            log.warning("engine not answering yet (%s); host CPUs from psutil: %d", exc, cpus)
        self.host_cpus = cpus
        self.controller = Controller(
            self.engine, config, cpus, StateStore(config.state_file), dry_run=self.dry_run
        )
        # metrics, /healthz, /api/history and /ui share the metrics port
        self.exporter = Exporter(self.controller.counters)
        self.liveness = Liveness(self.controller.itval.value)
        self.web = AgentWeb(
            self.exporter, self.liveness, History(), cpus, node=self.controller.node
        )
        self.http: HttpServer | None = None
        self.controller.on_engine = self._on_engine
        self.reporter = (
            AllocatorReporter(
                config.allocator.url,
                config.allocator.token,
                self.controller.node,
                config.allocator.timeout,
            )
            if config.allocator.url
            else None
        )
        self.controller.after_round = self._after_round
        self.controller.on_itval = self._reschedule
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1})
        self.listener = EventListener(
            self.engine,
            self.controller.on_start,
            self.controller.on_finish,
            lambda: self.controller.resync("reconnect"),
            backoff_max=config.reconnect_max,
        )
        self._stop = threading.Event()

    def _on_engine(self, error: str | None) -> None:
        if error is None:
            self.liveness.engine_ok()
        else:
            self.liveness.engine_failed(error)

    def _after_round(self, views: list[dict[str, Any]]) -> None:
        self.web.record_round(views, self.controller.itval.value)
        if self.reporter is not None:
            self.reporter.send(views)

    def _reschedule(self, seconds: float) -> None:
        """A new itval (back-off or reset): the next round is ``seconds`` from now."""
        if self.scheduler.get_job(JOB_ID) is None:
            return
        self.scheduler.reschedule_job(JOB_ID, trigger="interval", seconds=seconds)
        log.debug("next round in %gs", seconds)

    def _safe_round(self) -> None:
        try:
            self.controller.round()
        except Exception:  # a round may fail; the next one runs anyway
            log.exception("round failed")

    def _serve_http(self) -> None:
        """/metrics, /healthz, /api/history and /ui on the metrics port (a port in use is
        logged, not fatal: the agent's work does not depend on it)."""
        port = self.cfg.metrics_port
        if not port:
            return
        try:
            self.http = HttpServer(self.web.route, self.cfg.metrics_addr, port)
        except OSError as exc:
            log.error(
                "cannot serve metrics on %s:%d (%s): /metrics, /healthz and /ui are off",
                self.cfg.metrics_addr,
                port,
                exc.strerror or exc,
            )
            return
        self.http.start()
        log.info("metrics on :%d/metrics, health on /healthz, live view on /ui", port)

    def run_once(self) -> None:
        log.info("one round: host_cpus=%d dry_run=%s", self.host_cpus, self.dry_run)
        self.controller.resync("start")
        self.controller.round()

    def run(self) -> None:
        log.info(
            "agent starting: engine=%s host_cpus=%d alpha=%g beta=%g itval=%gs itval_max=%gs "
            "dry_run=%s state=%s",
            self.engine.base_url,
            self.host_cpus,
            self.cfg.alpha,
            self.cfg.beta,
            self.controller.itval.value,
            self.cfg.itval_max,
            self.dry_run,
            self.cfg.state_file,
        )
        self._serve_http()
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: self._stop.set())
        itval = self.controller.itval.value
        self.scheduler.add_job(
            self._safe_round,
            "interval",
            seconds=itval,
            id=JOB_ID,
            next_run_time=datetime.now() + timedelta(seconds=itval),
        )
        self.scheduler.start()
        self.listener.start()  # connects, resyncs, then follows start/die events
        try:
            while not self._stop.wait(1.0):
                pass
        finally:
            self.shutdown()

    def stop(self) -> None:
        self._stop.set()

    def shutdown(self) -> None:
        log.info("stopping: restoring original CPU settings of managed containers")
        self.scheduler.shutdown(wait=False)
        self.listener.stop()
        if self.http is not None:
            self.http.stop()
        with self.controller.lock:  # a round in progress finishes first
            n = self.controller.restore_all()
        log.info("stopped; restored %d container(s)", n)
        self.engine.close()
