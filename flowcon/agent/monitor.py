"""Container Monitor (paper section 3.2.1): a job's metric and resource usage per round.

Logs are read incrementally: each round asks the engine only for lines after the
last timestamp seen, so a long-running job's log is never read twice. CPU usage is
the container's cumulative CPU time between two rounds, as a share of the host, read
from its cgroup files when reachable (no engine call), else from the engine's stats.
Block and network I/O (only shown by ``flowcon status``) need the engine's stats:
they are refreshed every ``io_interval`` seconds, not every round.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field

from flowcon.core.gpu_usage import ContainerGpu, GpuSample, attribute, gpu_share, per_process
from flowcon.core.growth import GrowthTracker, resource_share
from flowcon.core.labels import Policy
from flowcon.core.metric_lines import LineKind, parse_line
from flowcon.engine.docker_engine import Stats
from flowcon.engine.protocol import Engine

log = logging.getLogger("flowcon.agent.monitor")

_WARN_EVERY = 100  # repeated bad lines: log the 1st, 101st, ...
# A job's metric regex that runs past its time limit on this many lines is switched off
# for the container (one error line): a pattern built to backtrack would otherwise cost
# the time limit on every line of a chatty job.
REGEX_TIMEOUTS_MAX = 3


@dataclass
class Usage:
    """Resource use over the last interval."""

    cpu_share: float | None = None  # of the whole host
    mem_bytes: int = 0
    blk_read: int = 0
    blk_write: int = 0
    net_rx: int = 0
    net_tx: int = 0
    # GPUs (flowcon.core.gpu_usage): its share of the host's GPUs, per GPU, its processes
    gpu_share: float | None = None
    gpus: tuple[ContainerGpu, ...] = ()
    gpu_processes: list[dict[str, object]] = field(default_factory=list)
    r: float | None = None  # the interval's R in G = P / R (resource_share)


@dataclass
class Progress:
    """What the job itself reported."""

    value: float | None = None  # last metric value
    value_ts: float | None = None
    step: int | None = None
    step_ts: float | None = None
    steps_per_s: float | None = None
    threads: int | None = None  # last "threads" seen: the job sizes its pool from its quota
    first_step_ts: float | None = None  # the first step line of the last read (None: none)
    lines: int = 0
    samples: int = 0
    skipped: dict[str, int] = field(default_factory=dict)


@dataclass
class ContainerMonitor:
    cid: str
    name: str
    policy: Policy
    tracker: GrowthTracker
    host_cpus: int
    max_line_bytes: int = 64 * 1024
    log_tail: int = 200
    history_len: int = 120
    log_since_ns: int = 0
    cgroup_parent: str = ""  # from inspect: where the cgroup files are
    pid: int = 0
    use_cgroup: bool = True  # False: CPU from the engine's stats every round
    io_interval: float = 60.0  # seconds between engine stats when CPU comes from cgroups
    cpu_source: str | None = None  # "cgroup" or "engine": where the last CPU figure came from
    _prev_cpu: tuple[str, float, int] | None = None  # (source, monotonic time, CPU ns)
    _io_at: float | None = None
    _no_cgroup: bool = False  # the last look found no cgroup files
    usage: Usage = field(default_factory=Usage)
    progress: Progress = field(default_factory=Progress)
    history: deque[tuple[float, float | None, float | None]] = field(init=False)
    _prev_step: tuple[float, int] | None = None
    regex_off: bool = False  # the job's regex timed out REGEX_TIMEOUTS_MAX times
    gpu_weight: float = 1.0  # weight of the GPU share in R (flowcon.core.growth)

    def __post_init__(self) -> None:
        self.history = deque(maxlen=self.history_len)

    def _skip(self, kind: str, detail: str) -> None:
        count = self.progress.skipped.get(kind, 0) + 1
        self.progress.skipped[kind] = count
        if count % _WARN_EVERY == 1:
            log.warning(
                "skipped line container=%s kind=%s count=%d detail=%r",
                self.name,
                kind,
                count,
                detail,
            )

    def read_logs(self, engine: Engine) -> int:
        """Feed new metric lines to the growth tracker; returns how many samples were read."""
        lines = engine.log_lines(
            self.cid,
            self.log_since_ns or None,
            None if self.log_since_ns else self.log_tail,
            self.max_line_bytes,
        )
        samples = 0
        self.progress.first_step_ts = None
        metric, regex = self.policy.metric, self.policy.regex
        for line in lines:
            self.log_since_ns = line.ts_ns
            self.progress.lines += 1
            if line.text is None:
                self._skip("too-long", f"{line.size} bytes > {self.max_line_bytes}")
                continue
            if self.regex_off:
                continue
            parsed = parse_line(line.text, metric, regex)
            ts = line.ts_ns / 1e9
            if parsed.step is not None:
                self._note_step(ts, parsed.step)
            if parsed.threads is not None:
                self._note_threads(parsed.threads)
            if parsed.kind is LineKind.SAMPLE:
                assert parsed.value is not None
                self.tracker.add_sample(ts, parsed.value)
                self.progress.value, self.progress.value_ts = parsed.value, ts
                samples += 1
            elif parsed.kind in (LineKind.MALFORMED, LineKind.NON_FINITE, LineKind.BAD_VALUE):
                self._skip(parsed.kind.value, parsed.detail)
            elif parsed.kind is LineKind.REGEX_TIMEOUT:
                self._regex_timed_out(parsed.detail)
        self.progress.samples += samples
        return samples

    def _regex_timed_out(self, detail: str) -> None:
        self._skip(LineKind.REGEX_TIMEOUT.value, detail)
        if self.progress.skipped[LineKind.REGEX_TIMEOUT.value] >= REGEX_TIMEOUTS_MAX:
            self.regex_off = True
            log.error(
                "metric regex switched off container=%s: it ran past its time limit on %d "
                "lines (a pattern that backtracks?); no metric is read from this container "
                "until it is recreated with a fixed flowcon.metric.regex",
                self.name,
                REGEX_TIMEOUTS_MAX,
            )

    def _note_threads(self, threads: int) -> None:
        if self.progress.threads is None:
            log.info("container=%s is thread-aware (threads=%d)", self.name, threads)
        self.progress.threads = threads

    @property
    def thread_aware(self) -> bool:
        """Its metric lines carry "threads": it resizes its thread pool to its quota."""
        return self.progress.threads is not None

    def _note_step(self, ts: float, step: int) -> None:
        self.progress.step, self.progress.step_ts = step, ts
        if self.progress.first_step_ts is None:
            self.progress.first_step_ts = ts

    def close_throughput(self) -> None:
        """Steps per second between the last step seen in the previous round and now."""
        p = self.progress
        if p.step is None or p.step_ts is None:
            return
        if self._prev_step is not None:
            t0, s0 = self._prev_step
            if p.step_ts > t0 and p.step >= s0:
                p.steps_per_s = (p.step - s0) / (p.step_ts - t0)
            elif p.step < s0:  # the job restarted its count
                p.steps_per_s = None
        self._prev_step = (p.step_ts, p.step)

    def needs_engine_stats(self, mono: float) -> bool:
        """Whether this round's ``read_stats`` will ask the engine (so the caller can fetch
        those, each a wait for the engine's one-second tick, in parallel beforehand)."""
        if not self.use_cgroup or self._no_cgroup:
            return True
        return self._io_at is None or mono - self._io_at >= self.io_interval

    def read_stats(self, engine: Engine, stats: Stats | None = None) -> None:
        """CPU share since the last round (and memory) from the cgroup files; block and
        network I/O, or everything when the files are not reachable, from the engine
        (``stats``: the engine's figures if the caller already fetched them)."""
        u = self.usage
        sample = (
            engine.cgroup_usage(self.cid, self.cgroup_parent, self.pid) if self.use_cgroup else None
        )
        self._no_cgroup = sample is None
        mono = time.monotonic()
        st: Stats | None
        mem: int | None
        if sample is None:
            st = stats if stats is not None else engine.stats(self.cid)
            source, at, cpu_ns, mem = "engine", st.at, st.cpu_ns, st.mem_bytes
        else:
            source, at, cpu_ns, mem = "cgroup", sample.at, sample.cpu_ns, sample.mem_bytes
            st = stats
            if st is None and (self._io_at is None or mono - self._io_at >= self.io_interval):
                st = engine.stats(self.cid)
        if st is not None:
            self._io_at = mono
            u.blk_read, u.blk_write = st.blk_read, st.blk_write
            u.net_rx, u.net_tx = st.net_rx, st.net_tx
            if mem is None:  # no memory file: the engine's figure, refreshed with the I/O
                mem = st.mem_bytes
        if mem is not None:
            u.mem_bytes = mem
        prev, self._prev_cpu = self._prev_cpu, (source, at, cpu_ns)
        self.cpu_source = source
        # A change of source (the files appeared or went away) restarts the difference:
        # the engine's sample time is its tick, not ours.
        if prev is None or prev[0] != source or at <= prev[1] or cpu_ns < prev[2]:
            u.cpu_share = None
            return
        u.cpu_share = (cpu_ns - prev[2]) / ((at - prev[1]) * 1e9 * self.host_cpus)

    def read_gpu(self, sample: GpuSample | None, pids: set[int] | None) -> None:
        """This round's GPU use from one NVML sample of the host and the container's PIDs
        (None for either: not measured this round, the figures are cleared)."""
        u = self.usage
        if sample is None or pids is None:
            u.gpu_share, u.gpus, u.gpu_processes = None, (), []
            return
        u.gpus = attribute(sample, pids)
        u.gpu_share = gpu_share(u.gpus, len(sample.devices))
        u.gpu_processes = per_process(u.gpus, sample)

    def measure(
        self,
        engine: Engine,
        now: float,
        stats: Stats | None = None,
        gpu: tuple[GpuSample, set[int] | None] | None = None,
    ) -> float | None:
        """One round: read logs, stats and (``gpu``: the round's NVML sample and the
        container's PIDs) GPU use, close the interval. Returns a fresh G or None."""
        self.read_logs(engine)
        self.read_stats(engine, stats)
        if gpu is not None:
            self.read_gpu(*gpu)
        self.close_throughput()
        u = self.usage
        # a GPU job's R counts its GPU time too; one on no GPU keeps R = its CPU share
        u.r = resource_share(u.cpu_share, u.gpu_share if u.gpus else None, self.gpu_weight)
        g = self.tracker.close_interval(u.r)
        self.history.append((now, self.progress.value, g))
        return g
