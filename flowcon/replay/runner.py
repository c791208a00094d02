"""Replay a scenario on the local Docker engine under one policy.

Jobs start at their scenario times; under ``flowcon`` the agent runs as a subprocess
(its own session, so a Ctrl-C reaches only us and it gets a clean SIGTERM). Every
second the runner samples each container's CPU use and CPU limit from its cgroup and
notices finished containers. Whatever happens (all done, Ctrl-C, an error), the
agent is stopped first (it restores limits) and then every container carrying this
run's ``flowcon.replay`` label is removed.

Under ``none`` the agent also runs, with ``dry_run: true`` (``observe``, the default), so
the growth efficiency G of every job is measured the same way without any limit being
changed; both policies' decision lines become ``RunResult.growth`` (growth.csv).
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from flowcon import contract
from flowcon.core.metric_lines import LineKind, parse_line
from flowcon.replay.cpu import CgroupCpu, CpuReading, stats_reading
from flowcon.replay.growth import read_agent_growth
from flowcon.replay.model import JobRecord, RunResult, Sample
from flowcon.replay.scenario import Job, Scenario

log = logging.getLogger(__name__)

REPLAY_LABEL = "flowcon.replay"
# Not "flowcon.job": that label marks allocator jobs, whose speed the agent reports.
JOB_LABEL = "flowcon.replay.job"
ENABLE_LABEL = "flowcon.enable"
METRIC_LABEL = "flowcon.metric"

Progress = Callable[[str, JobRecord | None, float], None]  # (event, job, now)


class ReplayError(RuntimeError):
    """The replay cannot start or continue (missing image, agent will not start...)."""


def agent_available() -> bool:
    """True if ``flowcon agent`` exists in this installation."""
    try:
        return importlib.util.find_spec("flowcon.agent.cli") is not None
    except (ImportError, ValueError):
        return False


def parse_docker_time(text: str) -> float | None:
    """'2026-11-21T19:20:56.123456789Z' -> epoch seconds; None for the zero time."""
    if not text or text.startswith("0001-"):
        return None
    main, _, rest = text.partition(".")
    frac, tz = "", "+00:00"
    if rest:
        digits = ""
        for i, ch in enumerate(rest):
            if not ch.isdigit():
                tz = rest[i:]
                break
            digits += ch
        frac = "." + digits[:6]
    elif main.endswith("Z"):
        main = main[:-1]
    if tz == "Z":
        tz = "+00:00"
    try:
        return datetime.fromisoformat(main + frac + tz).timestamp()
    except ValueError:
        return None


def last_metric(text: str) -> tuple[int | None, float | None]:
    """(step, loss) of the last JSON metric line in a log text (``parse_line`` reads it)."""
    for line in reversed(text.splitlines()):
        parsed = parse_line(line, "loss")
        if parsed.kind in (LineKind.TEXT, LineKind.MALFORMED):
            continue
        return parsed.step, parsed.value if parsed.kind is LineKind.SAMPLE else None
    return None, None


@contextlib.contextmanager
def _sigint_deferred() -> Iterator[None]:
    """Keep a second Ctrl-C from cutting the cleanup short (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class AgentProcess:
    """``flowcon agent --config FILE`` as a child process with its log in a file."""

    def __init__(self, config: dict[str, Any], out_dir: Path, command: list[str] | None) -> None:
        self.config_path = out_dir / "agent.yaml"
        self.log_path = out_dir / "agent.log"
        # A private state file: other agents on this host must not share ours; no metrics
        # port (several replays may run on one host, and 9464 belongs to a real agent).
        config = {
            "state_file": str((out_dir / "agent-state.json").resolve()),
            "metrics_port": None,
            **config,
        }
        self.config_path.write_text(yaml.safe_dump(config, sort_keys=False))
        self.command = (command or [sys.executable, "-m", "flowcon.cli", "agent"]) + [
            "--config",
            str(self.config_path),
        ]
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code: int | None = None
        self.died_at: float | None = None
        self.cpu_seconds: float | None = None  # the agent's own CPU time, read at stop

    def start(self, warmup: float) -> None:
        with self.log_path.open("ab") as logf:
            self.proc = subprocess.Popen(
                self.command,
                stdout=logf,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        deadline = time.monotonic() + warmup
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.exit_code = self.proc.returncode
                raise ReplayError(
                    f"the agent exited at start with code {self.exit_code}; "
                    f"last lines of {self.log_path}:\n{self.tail()}"
                )
            time.sleep(0.1)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.cpu_seconds = _cpu_seconds(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                log.warning("agent ignored SIGTERM for %.0f s: killing it", timeout)
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.exit_code = self.proc.returncode
        return self.exit_code

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def summary(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "config": str(self.config_path),
            "log": str(self.log_path),
            "exit_code": self.exit_code,
            "died_at": self.died_at,
            "cpu_seconds": self.cpu_seconds,
        }


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a live process (None if it cannot be read)."""
    import psutil

    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return round(times.user + times.system, 3)


class Replay:
    """One scenario under one policy on one engine."""

    def __init__(
        self,
        client: Any,
        scenario: Scenario,
        policy: str,
        out_dir: Path,
        *,
        sample_interval: float = 1.0,
        timeout: float | None = None,
        agent_command: list[str] | None = None,
        agent_config: dict[str, Any] | None = None,
        agent_warmup: float = 3.0,
        progress: Progress | None = None,
        run_id: str | None = None,
        labels: dict[str, str] | None = None,
        observe: bool = True,
    ) -> None:
        if policy not in ("none", "flowcon"):
            raise ValueError(f"policy must be none or flowcon, got {policy!r}")
        self.client = client
        self.scenario = scenario
        self.policy = policy
        self.out_dir = out_dir
        self.sample_interval = sample_interval
        self.timeout = timeout
        self.agent_command = agent_command
        self.agent_config = agent_config
        self.agent_warmup = agent_warmup
        self.progress = progress or (lambda event, job, now: None)
        self.run_id = run_id or uuid.uuid4().hex[:10]
        self.extra_labels = dict(labels or {})  # e.g. the test suite's cleanup label
        # Under none: a dry-run agent records G (no agent installed: no growth, logged).
        self.observe = observe and policy == "none"
        if self.observe and agent_command is None and not agent_available():
            log.warning("policy none: no agent installed, so no growth timeline")
            self.observe = False
        self.t0 = 0.0
        self._readers: dict[str, CgroupCpu] = {}
        self._last: dict[str, tuple[float, int]] = {}  # container id -> (time, usage ns)
        self._last_step_poll = 0.0
        self.foreign_max = 0  # most FlowCon-enabled containers of others seen at once
        self.host_cpus = os.cpu_count() or 1  # threads: pinned sets this many torch threads

    # -- the run ---------------------------------------------------------------

    def run(self) -> RunResult:
        self.out_dir.mkdir(parents=True, exist_ok=True)
        result = RunResult(
            scenario=self.scenario.name,
            policy=self.policy,
            run_id=self.run_id,
            started_at=time.time(),
            host_cpus=self.host_cpus,
            alpha=self.scenario.alpha,
            itval=self.scenario.itval,
            jobs=[JobRecord(j.name, j.image, j.start) for j in self.scenario.jobs],
            threads=self.scenario.threads,
            adapt_threads=self.scenario.adapt_threads,
        )
        if self.policy == "flowcon":
            result.control = self.agent_settings().get("control")
        agent: AgentProcess | None = None
        try:
            self._check_images()
            if self.policy == "flowcon" or self.observe:
                config = self.agent_settings()
                if self.observe:
                    config["dry_run"] = True  # computes G and lists, changes no limit
                agent = AgentProcess(config, self.out_dir, self.agent_command)
                agent.start(self.agent_warmup)
            self.t0 = time.time()
            result.started_at = self.t0
            self._loop(result, agent)
        except BaseException as exc:  # KeyboardInterrupt and SystemExit included
            result.interrupted = True
            result.errors.append(f"{type(exc).__name__}: {exc}")
            raise
        finally:
            with _sigint_deferred():
                self._finish(result, agent)
        return result

    def agent_settings(self) -> dict[str, Any]:
        """The agent's config for this run, scoped to this run's containers.

        Without ``match_labels`` the agent would also manage every other FlowCon-enabled
        container on the engine and share the host among them.
        """
        config = self.scenario.agent_config()
        config.update(self.agent_config or {})
        config.setdefault("match_labels", {REPLAY_LABEL: self.run_id})
        return config

    def _check_images(self) -> None:
        import docker.errors

        from flowcon.engine.images import ensure_images, model_of

        for image in sorted({j.image for j in self.scenario.jobs}):
            try:
                self.client.images.get(image)
                continue
            except docker.errors.ImageNotFound:
                pass
            model = model_of(image)
            if model is None:
                raise ReplayError(f"image {image} is not on the engine (replays never pull)")
            log.info("building missing training image %s", image)
            ensure_images(self.client, [model])

    def _loop(self, result: RunResult, agent: AgentProcess | None) -> None:
        pending = sorted(
            zip(self.scenario.jobs, result.jobs, strict=True), key=lambda p: p[0].start
        )
        running: dict[str, JobRecord] = {}  # container id -> record
        while pending or running:
            now = time.time() - self.t0
            while pending and pending[0][0].start <= now:
                job, rec = pending.pop(0)
                self._launch(job, rec)
                if rec.container_id is not None:
                    running[rec.container_id] = rec
                self.progress("started", rec, rec.submitted or now)
            self._sample(result, running)
            self._reap(running)
            if agent is not None and agent.died_at is None and not agent.alive():
                agent.died_at = round(time.time() - self.t0, 3)
                agent.exit_code = agent.proc.returncode if agent.proc else None
                msg = (
                    f"the agent exited with code {agent.exit_code} at t={agent.died_at:.0f} s; "
                    f"the rest of the run is uncontrolled. Log tail:\n{agent.tail()}"
                )
                log.error("%s", msg)
                result.errors.append(msg)
            self.progress("tick", None, time.time() - self.t0)
            if self.timeout is not None and time.time() - self.t0 > self.timeout:
                raise ReplayError(f"replay still running after its {self.timeout:.0f} s timeout")
            next_start = pending[0][0].start if pending else float("inf")
            wait = min(self.sample_interval, max(0.0, next_start - (time.time() - self.t0)))
            time.sleep(max(0.05, wait))

    def _labels(self, job: Job, env: dict[str, str]) -> dict[str, str]:
        labels = dict(self.extra_labels)
        labels.update({REPLAY_LABEL: self.run_id, JOB_LABEL: job.name, METRIC_LABEL: "loss"})
        if self.policy == "flowcon" or self.observe:
            labels[ENABLE_LABEL] = "true"
        from flowcon.engine.images import model_of
        from flowcon.report import adapt_from_env

        if model_of(job.image) is not None:
            # the shipped training images report through flowcon.report, which resizes
            # the pool unless FLOWCON_ADAPT_THREADS=0: say so before their first line
            adapts = adapt_from_env(env, err=io.StringIO())
            labels[contract.LABEL_THREADS] = (
                contract.THREADS_ADAPTIVE if adapts else contract.THREADS_FIXED
            )
        return labels

    def _launch(self, job: Job, rec: JobRecord) -> None:
        import docker.errors

        name = f"flowcon-replay-{self.run_id}-{job.name}"  # growth parsing relies on it
        rec.submitted = round(time.time() - self.t0, 3)
        env = self.scenario.job_environment(job, self.host_cpus)
        try:
            container = self.client.containers.run(
                job.image,
                command=list(job.command) if job.command else None,
                name=name,
                detach=True,
                labels=self._labels(job, env),
                environment=env,
                network_mode="none",  # training jobs never download; no bridge needed
            )
        except docker.errors.DockerException as exc:
            rec.error = f"could not start: {exc}"
            rec.finished = rec.submitted
            log.error("job %s: %s", job.name, rec.error)
            self.progress("finished", rec, rec.finished)
            return
        rec.container_id = container.id
        self._readers[container.id] = CgroupCpu(container.id)

    def _read_cpu(self, cid: str) -> CpuReading | None:
        reader = self._readers.get(cid)
        if reader is not None:
            reading = reader.read()
            if reading is not None or reader.found:
                return reading
        try:  # no cgroup access: the engine's one-shot stats
            container = self.client.containers.get(cid)
            stats = container.stats(stream=False, one_shot=True)
            return stats_reading(stats, container.attrs)
        except Exception:  # gone or engine busy: skip this sample
            return None

    def _sample(self, result: RunResult, running: dict[str, JobRecord]) -> None:
        for cid, rec in list(running.items()):
            reading = self._read_cpu(cid)
            now = time.time()
            if reading is None:
                continue
            prev = self._last.get(cid)
            self._last[cid] = (now, reading.usage_ns)
            if prev is None or now <= prev[0] or reading.usage_ns < prev[1]:
                continue
            cpu = (reading.usage_ns - prev[1]) / 1e9 / (now - prev[0])
            result.samples.append(
                Sample(
                    round(now - self.t0, 3),
                    rec.name,
                    round(cpu, 4),
                    None if reading.limit_cpus is None else round(reading.limit_cpus, 4),
                    reading.shares,
                    reading.cpuset,
                )
            )
        if time.time() - self._last_step_poll >= 5.0:
            self._last_step_poll = time.time()
            for cid, rec in running.items():
                with contextlib.suppress(Exception):
                    tail = self.client.api.logs(cid, stdout=True, stderr=False, tail=3)
                    step, loss = last_metric(tail.decode(errors="replace"))
                    if step is not None:
                        rec.steps, rec.final_loss = step, loss

    def _reap(self, running: dict[str, JobRecord]) -> None:
        import docker.errors

        try:
            listed = self.client.containers.list(
                all=True, sparse=True, filters={"label": f"{REPLAY_LABEL}={self.run_id}"}
            )
        except docker.errors.DockerException as exc:
            log.warning("could not list containers (%s); retrying next tick", exc)
            return
        status = {c.id: c.attrs.get("State") for c in listed}
        self._count_foreign()
        for cid, rec in list(running.items()):
            if cid not in status:
                rec.error = "container vanished (removed by someone else?)"
                rec.finished = round(time.time() - self.t0, 3)
                del running[cid]
                self.progress("finished", rec, rec.finished)
                continue
            if status[cid] not in ("exited", "dead"):
                continue
            try:
                attrs = self.client.api.inspect_container(cid)
            except docker.errors.DockerException as exc:
                log.warning("inspect %s failed (%s); retrying", rec.name, exc)
                continue
            state = attrs.get("State", {})
            finished = parse_docker_time(state.get("FinishedAt", ""))
            rec.finished = round((finished or time.time()) - self.t0, 3)
            rec.exit_code = state.get("ExitCode")
            if rec.exit_code != 0:
                rec.error = f"exit code {rec.exit_code}"
            del running[cid]
            self.progress("finished", rec, rec.finished)

    def _count_foreign(self) -> None:
        """Note other FlowCon-enabled containers: an agent shares the host among them too."""
        with contextlib.suppress(Exception):
            managed = self.client.containers.list(
                sparse=True, filters={"label": f"{ENABLE_LABEL}=true", "status": "running"}
            )
            foreign = [
                c for c in managed if (c.attrs.get("Labels") or {}).get(REPLAY_LABEL) != self.run_id
            ]
            self.foreign_max = max(self.foreign_max, len(foreign))

    # -- the end ---------------------------------------------------------------

    def _finish(self, result: RunResult, agent: AgentProcess | None) -> None:
        result.foreign_managed_max = self.foreign_max
        if self.foreign_max:
            result.errors.append(
                f"warning: up to {self.foreign_max} FlowCon-enabled container(s) of others ran "
                "during this replay; an agent divides the host among them too"
            )
        if agent is not None:
            agent.stop()
            result.agent = agent.summary()
            result.agent["dry_run"] = self.observe
            prefix = f"flowcon-replay-{self.run_id}-"
            result.growth = read_agent_growth(agent.log_path, prefix, self.t0)
        logs_dir = self.out_dir / "logs"
        for rec in result.jobs:
            if rec.container_id is None:
                continue
            with contextlib.suppress(Exception):
                text = self.client.api.logs(rec.container_id, stdout=True, stderr=True)
                logs_dir.mkdir(exist_ok=True)
                (logs_dir / f"{rec.name}.log").write_bytes(text)
                step, loss = last_metric(text.decode(errors="replace"))
                if step is not None:
                    rec.steps, rec.final_loss = step, loss
        removed = remove_run_containers(self.client, self.run_id)
        log.info("removed %d container(s) of replay %s", removed, self.run_id)


def remove_run_containers(client: Any, run_id: str) -> int:
    """Force-remove every container labelled with this replay's run id."""
    removed = 0
    for _ in range(3):  # a container may still be starting on the first pass
        try:
            found = client.containers.list(
                all=True, sparse=True, filters={"label": f"{REPLAY_LABEL}={run_id}"}
            )
        except Exception as exc:
            log.error("cannot list containers of replay %s: %s", run_id, exc)
            return removed
        if not found:
            break
        for c in found:
            try:
                c.remove(force=True)
                removed += 1
            except Exception as exc:  # already gone, or removal in progress
                log.debug("remove %s: %s", c.id[:12], exc)
    return removed
