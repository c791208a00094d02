"""The agent's YAML configuration, with the paper's defaults.

alpha 5% and itval 20 s are the settings the paper evaluates most (section 5.3);
beta = 2 is what its section 5.3 example implies: with two containers the slow one
in CL gets 1/(beta * 2) = 0.25 of the host.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml


class ConfigError(ValueError):
    """The configuration file cannot be used; the message says which key and why."""


def _positive(name: str, value: float) -> None:
    if not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{name} must be a positive number, got {value!r}")


@dataclass
class AllocatorConfig:
    url: str | None = None  # e.g. http://manager:8080; None: do not report
    token: str | None = None
    timeout: float = 5.0


@dataclass
class Config:
    alpha: float = 0.05
    itval: float = 20.0
    itval_max: float = 320.0  # cap of the exponential back-off
    beta: float = 2.0
    reference_intervals: int = 3  # intervals that set a job's reference G
    min_cpu_share: float = 0.01  # floor of R in G = P / R
    min_update_cpus: float = 0.02  # limit changes smaller than this are not sent to the engine
    state_file: str = "/var/lib/flowcon/agent-state.json"
    docker_host: str | None = None  # None: DOCKER_HOST or the default socket
    # Prometheus /metrics, /healthz and the live view /ui; None: off. 9464 is the port
    # OpenTelemetry's Prometheus exporter uses by default (docs/deploy-agent.md).
    metrics_port: int | None = 9464
    metrics_addr: str = "0.0.0.0"
    log_tail: int = 200  # lines read from a container's existing log when first seen
    max_line_bytes: int = 64 * 1024
    history: int = 120  # measurements kept per container (status, debugging)
    reconnect_max: float = 10.0  # cap of the event-stream reconnect back-off, s
    # CPU time: "auto" reads the containers' cgroup files under cgroup_root when they are
    # reachable (no engine call), else the engine's stats; "engine" always asks the engine.
    cpu_source: str = "auto"
    cgroup_root: str = "/sys/fs/cgroup"
    # With CPU from cgroups, block/network I/O (shown by `flowcon status`) come from the
    # engine's stats at most this often, in seconds (0: every round).
    io_stats_interval: float = 60.0
    dry_run: bool = False
    # Only containers carrying all these labels (with these values) are considered: lets
    # several agents (tests, replays) share one engine without touching each other's jobs.
    match_labels: dict[str, str] = field(default_factory=dict)
    allocator: AllocatorConfig = field(default_factory=AllocatorConfig)

    def validate(self) -> None:
        """Each field in turn; the first bad one raises ConfigError naming it."""
        self._validate_timing()
        self._validate_sources()
        self._validate_counts()
        self._validate_allocator()

    def _validate_timing(self) -> None:
        for name in ("alpha", "itval", "itval_max", "beta", "min_cpu_share", "reconnect_max"):
            _positive(name, getattr(self, name))
        if self.itval_max < self.itval:
            raise ConfigError(f"itval_max ({self.itval_max}) is below itval ({self.itval})")
        if not isinstance(self.min_update_cpus, int | float) or not (0 <= self.min_update_cpus < 1):
            raise ConfigError(f"min_update_cpus must be in [0, 1), got {self.min_update_cpus!r}")

    def _validate_sources(self) -> None:
        if self.cpu_source not in ("auto", "engine"):
            raise ConfigError(f"cpu_source must be auto or engine, got {self.cpu_source!r}")
        if not isinstance(self.cgroup_root, str) or not self.cgroup_root:
            raise ConfigError(f"cgroup_root must be a directory path, got {self.cgroup_root!r}")
        if (
            not isinstance(self.io_stats_interval, int | float)
            or isinstance(self.io_stats_interval, bool)
            or not math.isfinite(self.io_stats_interval)
            or self.io_stats_interval < 0
        ):
            value = self.io_stats_interval
            raise ConfigError(f"io_stats_interval must be a number of seconds >= 0, got {value!r}")
        if self.min_cpu_share > 1:
            raise ConfigError("min_cpu_share is a share of the host: at most 1")

    def _validate_counts(self) -> None:
        for name in ("reference_intervals", "history", "max_line_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
        if not isinstance(self.log_tail, int) or self.log_tail < 0:
            raise ConfigError(f"log_tail must be an integer >= 0, got {self.log_tail!r}")
        if self.metrics_port is not None and not (
            isinstance(self.metrics_port, int) and 0 < self.metrics_port < 65536
        ):
            raise ConfigError(f"metrics_port must be a TCP port, got {self.metrics_port!r}")

    def _validate_allocator(self) -> None:
        if self.allocator.url is not None and not str(self.allocator.url).startswith(
            ("http://", "https://")
        ):
            raise ConfigError(f"allocator.url must be http(s)://..., got {self.allocator.url!r}")
        _positive("allocator.timeout", self.allocator.timeout)
        if not isinstance(self.match_labels, dict) or not all(
            isinstance(k, str) and isinstance(v, str | int | float) and not isinstance(v, bool)
            for k, v in self.match_labels.items()
        ):
            raise ConfigError("match_labels must map label names to string values")
        self.match_labels = {k: str(v) for k, v in self.match_labels.items()}


_INT_FIELDS = {"reference_intervals", "history", "max_line_bytes", "log_tail", "metrics_port"}


def from_mapping(data: dict[str, Any]) -> Config:
    known = {f.name for f in fields(Config)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown key(s): {', '.join(unknown)}")
    values = dict(data)
    alloc_raw = values.pop("allocator", None) or {}
    if not isinstance(alloc_raw, dict):
        raise ConfigError("allocator must be a mapping with url and token")
    alloc_known = {f.name for f in fields(AllocatorConfig)}
    if set(alloc_raw) - alloc_known:
        bad = ", ".join(sorted(set(alloc_raw) - alloc_known))
        raise ConfigError(f"unknown allocator key(s): {bad}")
    for name, value in values.items():
        if name in _INT_FIELDS and isinstance(value, float) and value.is_integer():
            values[name] = int(value)
    try:
        cfg = Config(**values, allocator=AllocatorConfig(**alloc_raw))
    except TypeError as exc:
        raise ConfigError(str(exc)) from None
    cfg.validate()
    return cfg


def load(path: str | Path | None) -> Config:
    """Read a YAML file; None gives the defaults. Raises ConfigError with a clear message."""
    if path is None:
        cfg = Config()
        cfg.validate()
        return cfg
    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings")
    try:
        return from_mapping(data)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
