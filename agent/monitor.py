"""Container Monitor (paper section 3.2.1): a job's metric and resource usage per round.

Logs are read incrementally: each round asks the engine only for lines after the
last timestamp seen, so a long-running job's log is never read twice. CPU usage is
the container's cumulative CPU time between two rounds, as a share of the host.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

from flowcon.agent.logreader import read_lines

from flowcon.core.growth import GrowthTracker
from flowcon.core.labels import Policy
from flowcon.core.metric_lines import LineKind, parse_line
from flowcon.engine.docker_engine import DockerEngine, Stats

log = logging.getLogger("flowcon.agent.monitor")

_WARN_EVERY = 100  # repeated bad lines: log the 1st, 101st, ...


@dataclass
class Usage:
    """Resource use over the last interval."""

    cpu_share: float | None = None  # of the whole host
    mem_bytes: int = 0
    blk_read: int = 0
    blk_write: int = 0
    net_rx: int = 0
    net_tx: int = 0


@dataclass
class Progress:
    """What the job itself reported."""

    value: float | None = None  # last metric value
    value_ts: float | None = None
    step: int | None = None
    step_ts: float | None = None
    steps_per_s: float | None = None
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
    prev_stats: Stats | None = None
    usage: Usage = field(default_factory=Usage)
    progress: Progress = field(default_factory=Progress)
    history: deque[tuple[float, float | None, float | None]] = field(init=False)
    _prev_step: tuple[float, int] | None = None

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

    def read_logs(self, engine: DockerEngine) -> int:
        """Feed new metric lines to the growth tracker; returns how many samples were read."""
        frames = engine.log_frames(
            self.cid, self.log_since_ns or None, None if self.log_since_ns else self.log_tail
        )
        samples = 0
        metric, regex = self.policy.metric, self.policy.regex
        for line in read_lines(frames, self.max_line_bytes, self.log_since_ns):
            self.log_since_ns = line.ts_ns
            self.progress.lines += 1
            if line.text is None:
                self._skip("too-long", f"{line.size} bytes > {self.max_line_bytes}")
                continue
            parsed = parse_line(line.text, metric, regex)
            ts = line.ts_ns / 1e9
            if parsed.step is not None:
                self._note_step(ts, parsed.step)
            if parsed.kind is LineKind.SAMPLE:
                assert parsed.value is not None
                self.tracker.add_sample(ts, parsed.value)
                self.progress.value, self.progress.value_ts = parsed.value, ts
                samples += 1
            elif parsed.kind in (LineKind.MALFORMED, LineKind.NON_FINITE, LineKind.BAD_VALUE):
                self._skip(parsed.kind.value, parsed.detail)
        self.progress.samples += samples
        return samples

    def _note_step(self, ts: float, step: int) -> None:
        self.progress.step, self.progress.step_ts = step, ts

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

    def read_stats(self, engine: DockerEngine) -> None:
        now = engine.stats(self.cid)
        prev, self.prev_stats = self.prev_stats, now
        u = self.usage
        u.mem_bytes, u.blk_read, u.blk_write = now.mem_bytes, now.blk_read, now.blk_write
        u.net_rx, u.net_tx = now.net_rx, now.net_tx
        if prev is None or now.at <= prev.at or now.cpu_ns < prev.cpu_ns:
            u.cpu_share = None
            return
        u.cpu_share = (now.cpu_ns - prev.cpu_ns) / ((now.at - prev.at) * 1e9 * self.host_cpus)

    def measure(self, engine: DockerEngine, now: float) -> float | None:
        """One round: read logs and stats, close the interval. Returns a fresh G or None."""
        self.read_logs(engine)
        self.read_stats(engine)
        self.close_throughput()
        g = self.tracker.close_interval(self.usage.cpu_share)
        self.history.append((now, self.progress.value, g))
        return g
