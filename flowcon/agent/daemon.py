"""Wire the agent together: engine, controller, listeners, scheduler, exporters, signals."""

from __future__ import annotations

import logging
import os
import signal
import threading
from datetime import datetime, timedelta
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler

from flowcon.agent.config import Config
from flowcon.agent.controller import Controller
from flowcon.agent.exporter import Exporter
from flowcon.agent.gpu_share import GpuShares, MpsDaemon
from flowcon.agent.listeners import EventListener
from flowcon.agent.reporter import AllocatorReporter
from flowcon.agent.state_file import StateStore
from flowcon.agent.toolkit import read_toolkit
from flowcon.agent.webview import AgentWeb
from flowcon.contract import LABEL_ENABLE, LABEL_JOB, LABEL_METRIC
from flowcon.engine.docker_engine import DockerEngine, EngineError
from flowcon.engine.gpus import GpuSampler
from flowcon.engine.host import host_capacity
from flowcon.tls import ENV_CACERT
from flowcon.web.health import Liveness
from flowcon.web.history import History
from flowcon.web.server import HttpServer

log = logging.getLogger("flowcon.agent")

JOB_ID = "algorithm1"


def _label_args(labels: dict[str, str]) -> str:
    return " ".join(f"--label {k}={v}" for k, v in labels.items())


def watching_line(url: str, engine: str, match_labels: dict[str, str]) -> str:
    """The start-up line: which engine, and which containers the agent looks at."""
    among = ""
    if match_labels:
        among = ", among those labelled " + ", ".join(f"{k}={v}" for k, v in match_labels.items())
    return (
        f"watching the Docker engine at {url} ({engine}) for containers labelled "
        f"{LABEL_ENABLE}=true (CPU limits managed) or {LABEL_JOB}=NAME (measured only){among}"
    )


def opt_in_hint(match_labels: dict[str, str]) -> str:
    """What to say while no container is opted in: the one command that opts one in."""
    labels = {**match_labels, LABEL_ENABLE: "true", LABEL_METRIC: "loss"}
    return (
        f"no container is opted in yet; opt one in with: docker run -d {_label_args(labels)} IMAGE"
    )


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
        self.engine_error: str | None = None  # why the engine did not answer at start
        try:
            engine_cpus = self.engine.ncpu()
            if engine_cpus and engine_cpus != cpus:
                log.warning(
                    "engine reports %d CPUs, psutil %d: using the engine's", engine_cpus, cpus
                )
                cpus = engine_cpus
        except EngineError as exc:  # the engine may come up later (run) or not (run_once)
            self.engine_error = str(exc)
        self.host_cpus = cpus
        # GPUs: NVML sampled once a round (one warning and CPU only where it is absent)
        self.gpus = GpuSampler() if config.gpu_source == "auto" else None
        measured = self.gpus is not None and self.gpus.available
        self.controller = Controller(
            self.engine,
            config,
            cpus,
            StateStore(config.state_file),
            dry_run=self.dry_run,
            gpus=self.gpus if measured else None,
            pids_of=self.engine.cgroup_pids if measured else None,
            gpu_shares=(
                GpuShares(
                    MpsDaemon(), config.gpu_share_dir, self.engine.restart, config.gpu_restart_cost
                )
                if measured
                else None
            ),
        )
        # metrics, /healthz, /api/history and /ui share the metrics port
        self.exporter = Exporter(self.controller.counters)
        self.liveness = Liveness(self.controller.itval.value)
        self.web = AgentWeb(
            self.exporter, self.liveness, History(), cpus, node=self.controller.node
        )
        self.http: HttpServer | None = None
        self.controller.on_engine = self._on_engine
        self.toolkit = read_toolkit(config.toolkit_config)
        log.info("NVIDIA container toolkit: %s (%s)", self.toolkit.state, self.toolkit.detail)
        self.reporter = (
            AllocatorReporter(
                config.allocator.url,
                config.allocator.token,
                self.controller.node,
                config.allocator.timeout,
                config.allocator.cacert or os.environ.get(ENV_CACERT),
                toolkit=self.toolkit.state,
            )
            if config.allocator.url
            else None
        )
        self.controller.after_round = self._after_round
        self.controller.pool.on_label_error = self.exporter.label_error
        self.controller.on_itval = self._reschedule
        self.scheduler = BackgroundScheduler(job_defaults={"coalesce": True, "max_instances": 1})
        self.listener = EventListener(
            self.engine,
            self.controller.on_start,
            self.controller.on_finish,
            lambda: self.controller.resync("reconnect"),
            backoff_max=config.reconnect_max,
            on_update=self.controller.on_update,
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

    def run_once(self) -> bool:
        """One round; False when it could not run (``controller.skipped`` says why)."""
        try:
            engine = self.engine.version().describe()
        except EngineError as exc:
            self.controller.skipped = str(exc)
            return False
        log.info(
            "one round on the Docker engine at %s (%s): host_cpus=%d dry_run=%s",
            self.engine.base_url,
            engine,
            self.host_cpus,
            self.dry_run,
        )
        self.controller.resync("start")
        return self.controller.round()

    def _greet(self) -> None:
        """Say what is watched, and how to opt a container in when none is yet."""
        try:
            engine = self.engine.version().describe()
        except EngineError as exc:
            log.warning(
                "%s; host CPUs from psutil: %d; the agent keeps trying", exc, self.host_cpus
            )
            return
        log.info(watching_line(self.engine.base_url, engine, self.cfg.match_labels))
        self.controller.resync("start")
        tracked = list(self.controller.tracked.values())
        if not tracked:
            log.info(opt_in_hint(self.cfg.match_labels))
            return
        managed = sum(1 for t in tracked if t.managed)
        log.info(
            "%d container(s) opted in: %d managed, %d measured only",
            len(tracked),
            managed,
            len(tracked) - managed,
        )

    def run(self) -> None:
        log.info(
            "agent starting: engine=%s host_cpus=%d alpha=%g beta=%g itval=%gs itval_max=%gs "
            "control=%s all_cl=%s dry_run=%s state=%s",
            self.engine.base_url,
            self.host_cpus,
            self.cfg.alpha,
            self.cfg.beta,
            self.controller.itval.value,
            self.cfg.itval_max,
            self.cfg.control,
            self.cfg.all_cl,
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
        self._greet()
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
        if self.gpus is not None:
            self.gpus.close()
        self.engine.close()
