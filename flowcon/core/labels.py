"""The container labels that opt a container in and describe its metric."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from flowcon import contract
from flowcon.core.metric_lines import MetricRegex, RegexError, compile_regex

# The label names, re-exported under their short names (flowcon.contract defines them).
CPUS_MAX = contract.LABEL_CPUS_MAX
CPUS_MIN = contract.LABEL_CPUS_MIN
ENABLE = contract.LABEL_ENABLE
JOB = contract.LABEL_JOB
METRIC = contract.LABEL_METRIC
GOAL = contract.LABEL_METRIC_GOAL
REGEX = contract.LABEL_METRIC_REGEX
THREADS = contract.LABEL_THREADS
GPU_SHARE = contract.LABEL_GPU_SHARE
THREAD_MODES = (contract.THREADS_ADAPTIVE, contract.THREADS_FIXED)

# What a Swarm task's container carries instead of its service's labels.
SERVICE_ID = "com.docker.swarm.service.id"

# Docker refuses --cpus below 0.01.
MIN_CPUS = 0.01

# Go's strconv.ParseBool, which Traefik (and Docker) read boolean labels with.
_TRUE = frozenset({"1", "t", "T", "TRUE", "true", "True"})
_FALSE = frozenset({"0", "f", "F", "FALSE", "false", "False"})


class LabelError(ValueError):
    """A label value FlowCon cannot use; the container is skipped."""


@dataclass(frozen=True)
class Policy:
    managed: bool  # flowcon.enable=true: its CPU limit is ours to change
    job: str | None  # flowcon.job: monitored for throughput even when not managed
    metric: str = "loss"
    goal: str = "min"
    regex: MetricRegex | None = None
    cpus_min: float | None = None
    cpus_max: float | None = None
    threads: str | None = None  # flowcon.threads: adaptive | fixed; None: learnt from lines
    gpu_share: bool = False  # flowcon.gpu.share=true: an MPS share when it shares a GPU

    @property
    def monitored(self) -> bool:
        return self.managed or self.job is not None

    def thread_aware(self, seen_threads: bool) -> bool:
        """Whether the job resizes its pool to its quota: the label when it says so, else
        whether its metric lines carry ``threads`` (``seen_threads``)."""
        if self.threads is None:
            return seen_threads
        return self.threads == contract.THREADS_ADAPTIVE


def parse_bool(key: str, raw: str) -> bool:
    """A boolean label as Go's strconv.ParseBool reads it: 1 t T TRUE true True, 0 f F
    FALSE false False; anything else (``yes``, `` true``, ``tRUE``) is a LabelError."""
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise LabelError(f"{key}={raw!r} is not a boolean: use true or false (or 1/0, t/f)")


def merge_service_labels(
    container: Mapping[str, str], service: Mapping[str, str]
) -> dict[str, str]:
    """A Swarm task's labels: its service's (``deploy.labels``) under its container's own
    (``labels``), the container's winning where both set a key."""
    return {**service, **container}


def _cpus(labels: Mapping[str, str], key: str) -> float | None:
    raw = labels.get(key)
    if raw is None or raw.strip() == "":
        return None
    try:
        value = float(raw)
    except ValueError:
        raise LabelError(f"{key}={raw!r} is not a number of CPUs") from None
    if not math.isfinite(value) or value < MIN_CPUS:
        raise LabelError(f"{key}={raw!r} must be a finite number of CPUs >= {MIN_CPUS}")
    return value


def compile_metric_regex(raw: str) -> MetricRegex:
    """A metric regex (the ``flowcon.metric.regex`` label, a job spec's ``metric.regex``):
    it compiles and has a named group ``value``; ``step`` and ``epoch`` groups are optional.
    LabelError says why not."""
    try:
        regex = compile_regex(raw)
    except RegexError as exc:
        raise LabelError(f"{REGEX}={raw!r} does not compile: {exc}") from None
    if "value" not in regex.groupindex:
        raise LabelError(f"{REGEX}={raw!r} has no named group (?P<value>...)")
    return regex


def parse_policy(labels: Mapping[str, str]) -> Policy | None:
    """The container's policy, None if FlowCon should ignore it; LabelError if a label is bad."""
    enable_raw = labels.get(ENABLE)
    job = labels.get(JOB) or None
    managed = False if enable_raw is None else parse_bool(ENABLE, enable_raw)
    if not managed and job is None:
        return None
    metric = labels.get(METRIC, "loss").strip() or "loss"
    goal = labels.get(GOAL, "min").strip().lower() or "min"
    if goal not in ("min", "max"):
        raise LabelError(f"{GOAL}={labels[GOAL]!r}: use min or max")
    regex = compile_metric_regex(labels[REGEX]) if labels.get(REGEX) else None
    cpus_min = _cpus(labels, CPUS_MIN)
    cpus_max = _cpus(labels, CPUS_MAX)
    if cpus_min is not None and cpus_max is not None and cpus_min > cpus_max:
        raise LabelError(f"{CPUS_MIN}={cpus_min} is above {CPUS_MAX}={cpus_max}")
    threads = (labels.get(THREADS) or "").strip() or None
    if threads is not None and threads not in THREAD_MODES:
        raise LabelError(f"{THREADS}={labels[THREADS]!r}: use {' or '.join(THREAD_MODES)}")
    share_raw = labels.get(GPU_SHARE)
    gpu_share = False if share_raw is None else parse_bool(GPU_SHARE, share_raw)
    return Policy(managed, job, metric, goal, regex, cpus_min, cpus_max, threads, gpu_share)
