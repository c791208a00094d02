"""The metric-line format that the agent reads from a container's output, and the
job side of thread-aware control.

Stdlib only, so a training script can copy this one file or import it from the
package. One JSON object per line on stdout, flushed at once, so the agent sees
progress as it happens rather than when a buffer fills.

Thread adaptation: when the caller has already imported torch (this module never
imports it), ``report`` re-reads the container's own CPU limit every
``RECHECK_SECONDS`` and resizes torch's intra-op thread pool to match, so a job whose
limit the agent lowers stops oversubscribing it: ceil(CFS quota) if a quota is set,
else the CPUs of the process's affinity set (a cpuset), at least 1. While it adapts,
every line carries ``"threads"``, the pool size in use. ``FLOWCON_ADAPT_THREADS=0``
turns it off (a job that pins its threads).
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

# Lines the agent accepts are bounded; keep ours far below that bound.
MAX_LINE_BYTES = 64 * 1024

# The field every line carries while the thread pool adapts (the agent's contract).
THREADS_FIELD = "threads"
ADAPT_ENV = "FLOWCON_ADAPT_THREADS"
# How often the limit is re-read: a file read, cheap, but not once per step.
RECHECK_SECONDS = 2.0

# The container's own CPU limit: cgroup v2, then v1 (as the engine mounts them).
CGROUP_V2_CPU_MAX = "/sys/fs/cgroup/cpu.max"
CGROUP_V1_QUOTA = "/sys/fs/cgroup/cpu/cpu.cfs_quota_us"
CGROUP_V1_PERIOD = "/sys/fs/cgroup/cpu/cpu.cfs_period_us"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def parse_cpu_max(text: str) -> float | None:
    """CPUs of a cgroup v2 ``cpu.max`` ("50000 100000"; "max 100000" = unlimited)."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    quota = int(fields[0])
    period = int(fields[1]) if len(fields) > 1 else 100_000
    return None if quota <= 0 or period <= 0 else quota / period


def parse_cfs(quota_text: str, period_text: str) -> float | None:
    """CPUs of cgroup v1 ``cpu.cfs_quota_us`` / ``cpu.cfs_period_us`` (-1 = unlimited)."""
    quota_us, period_us = int(quota_text), int(period_text)
    return None if quota_us <= 0 or period_us <= 0 else quota_us / period_us


def cpu_quota(
    v2_path: str | None = None,
    v1_quota_path: str | None = None,
    v1_period_path: str | None = None,
) -> float | None:
    """CPUs granted by the container's CFS quota (cgroup v2 or v1), None if unlimited
    or unreadable. Paths default to the module constants (read at call time)."""
    try:
        return parse_cpu_max(_read(v2_path or CGROUP_V2_CPU_MAX))
    except (OSError, ValueError):
        pass
    try:
        return parse_cfs(
            _read(v1_quota_path or CGROUP_V1_QUOTA), _read(v1_period_path or CGROUP_V1_PERIOD)
        )
    except (OSError, ValueError):
        return None


def affinity_cpus() -> int:
    """CPUs this process may run on (its affinity set reflects a cpuset), at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # not on Linux
        return max(1, os.cpu_count() or 1)


def target_threads(quota: float | None, cpus: int) -> int:
    """ceil(quota) if a quota is set, else ``cpus``; never more than ``cpus``, at least 1."""
    cpus = max(1, cpus)
    if quota is None:
        return cpus
    return max(1, min(cpus, math.ceil(quota)))


def adapt_from_env(environ: dict[str, str] | None = None, err: TextIO | None = None) -> bool:
    """FLOWCON_ADAPT_THREADS: on unless 0/false/no/off; a bad value says so and is on."""
    env = os.environ if environ is None else environ
    raw = env.get(ADAPT_ENV, "").strip().lower()
    if not raw or raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    print(
        f"# flowcon.report: {ADAPT_ENV}={env.get(ADAPT_ENV)!r}: expected 0 or 1; "
        "adapting threads (the default)",
        file=err if err is not None else sys.stderr,
        flush=True,
    )
    return True


class ThreadAdapter:
    """Sizes torch's intra-op pool from the container's CPU limit, rechecked at most
    every ``interval`` seconds. ``clock``, ``quota`` and ``cpus`` are injectable."""

    def __init__(
        self,
        interval: float = RECHECK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        quota: Callable[[], float | None] = cpu_quota,
        cpus: Callable[[], int] = affinity_cpus,
        enabled: bool | None = None,
    ) -> None:
        self.interval = interval
        self.clock = clock
        self.quota = quota
        self.cpus = cpus
        self._enabled = enabled  # None: FLOWCON_ADAPT_THREADS, read on first use
        self._next_check = -math.inf
        self._target: int | None = None  # what the limit asked for at the last check
        self.threads: int | None = None  # pool size in use, as of the last check
        self._failed = False

    @property
    def enabled(self) -> bool:
        if self._enabled is None:
            self._enabled = adapt_from_env()
        return self._enabled

    def current(self) -> int | None:
        """The pool size to put on this line, None when not adapting (torch not imported
        by the caller, or switched off). Rechecks the limit when the interval is up."""
        torch = sys.modules.get("torch")
        if torch is None or not self.enabled:
            return None
        now = self.clock()
        if now >= self._next_check:
            self._next_check = now + self.interval
            self._check(torch)
        return self.threads

    def _check(self, torch: Any) -> None:
        try:
            target = target_threads(self.quota(), self.cpus())
            if target != self._target:
                if target != int(torch.get_num_threads()):
                    torch.set_num_threads(target)
                self._target = target
            self.threads = int(torch.get_num_threads())
        except Exception as exc:  # reporting must never break on thread adaptation
            if not self._failed:
                self._failed = True
                print(f"# flowcon.report: thread adaptation: {exc!r}", file=sys.stderr)


_ADAPTER = ThreadAdapter()


def adaptation_enabled() -> bool:
    """Whether ``report`` adapts the thread pool once torch is imported (FLOWCON_ADAPT_THREADS)."""
    return _ADAPTER.enabled


def _clean(value: Any) -> Any:
    # JSON has no NaN/inf; emit null so the line stays valid and the agent skips the value.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "item") and callable(value.item):  # numpy / torch scalars
        try:
            return _clean(value.item())
        except (TypeError, ValueError):
            return str(value)
    return value


def format_line(**metrics: Any) -> str:
    """Render one metric line (without the newline)."""
    payload = {key: _clean(val) for key, val in metrics.items()}
    payload.setdefault("ts", round(time.time(), 3))
    line = json.dumps(payload, separators=(",", ":"), default=str)
    if len(line.encode()) > MAX_LINE_BYTES:
        raise ValueError(f"metric line is {len(line)} bytes, over {MAX_LINE_BYTES}")
    return line


def report(
    stream: TextIO | None = None,
    *,
    adapt_threads: bool | ThreadAdapter = True,
    **metrics: Any,
) -> str:
    """Print one metric line, e.g. ``report(step=1200, loss=0.42)``; returns the line.

    ``adapt_threads``: True uses the module's adapter (on while torch is imported, unless
    FLOWCON_ADAPT_THREADS=0), False leaves the thread pool alone on this call, or an
    adapter of one's own.
    """
    adapter = _ADAPTER if adapt_threads is True else adapt_threads
    if adapter is not False:
        threads = adapter.current()
        if threads is not None:
            metrics[THREADS_FIELD] = threads
    line = format_line(**metrics)
    out = stream if stream is not None else sys.stdout
    out.write(line + "\n")
    out.flush()
    return line
