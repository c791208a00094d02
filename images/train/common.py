"""Shared plumbing for the training images: thread count, env knobs, the step loop.

Every job prints one metric line per optimizer step with ``flowcon.report`` so the
agent can follow its loss curve; the job ends after a fixed number of steps, so its
completion time depends only on the CPU it gets.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from flowcon.report import ADAPT_ENV, adaptation_enabled, cpu_quota, report


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r}: expected an integer")
    if value < 1:
        sys.exit(f"{name}={raw!r}: expected an integer >= 1")
    return value


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        sys.exit(f"{name}={raw!r}: expected a number")
    if not math.isfinite(value) or value <= 0:
        sys.exit(f"{name}={raw!r}: expected a positive number")
    return value


def thread_count() -> int:
    """FLOWCON_THREADS, else the CPU quota rounded up, else every visible CPU.

    The pool size at start; afterwards ``flowcon.report`` resizes the pool to the
    container's current limit every few seconds while ``adapt_threads()``.
    """
    cpus = os.cpu_count() or 1
    override = os.environ.get("FLOWCON_THREADS", "").strip()
    if override:
        return env_int("FLOWCON_THREADS", cpus)
    quota = cpu_quota()
    if quota is not None:
        return max(1, min(cpus, math.ceil(quota)))
    return cpus


def adapt_threads() -> bool:
    """Whether ``flowcon.report`` resizes the pool to the CPU limit as the job runs:
    FLOWCON_ADAPT_THREADS (report's rule: on unless 0); when that is unset, a
    FLOWCON_THREADS override pins the pool (off)."""
    if not os.environ.get(ADAPT_ENV, "").strip() and os.environ.get("FLOWCON_THREADS", "").strip():
        return False
    return adaptation_enabled()


def setup_torch(seed: int) -> None:
    import torch

    torch.set_num_threads(thread_count())
    with contextlib.suppress(RuntimeError):  # already set by an earlier parallel call
        torch.set_num_interop_threads(1)
    torch.manual_seed(env_int("FLOWCON_SEED", seed))


def optimize(opt: Any, loss: Any) -> float:
    """One optimizer step on ``loss``; returns the value the step reports as its loss."""
    opt.zero_grad()
    loss.backward()
    opt.step()
    return float(loss.item())


def train_loop(model: str, step: Callable[[int], float], default_iterations: int) -> int:
    """Run ``step`` FLOWCON_ITERATIONS times, report the loss after each; exit code."""
    iterations = env_int("FLOWCON_ITERATIONS", default_iterations)
    started = time.time()
    adapt = adapt_threads()
    mode = "adapting to the CPU limit" if adapt else "fixed"
    print(
        f"# {model}: {iterations} iterations, {thread_count()} threads ({mode})",
        file=sys.stderr,
        flush=True,
    )
    for i in range(1, iterations + 1):
        loss = step(i)
        if not math.isfinite(loss):
            print(f"# {model}: loss diverged at step {i}", file=sys.stderr, flush=True)
            return 1
        report(step=i, loss=round(loss, 6), adapt_threads=adapt)
    elapsed = time.time() - started
    print(f"# {model}: done in {elapsed:.1f} s", file=sys.stderr, flush=True)
    return 0
