"""The largest local batch that fits a worker's accelerator memory, probed by the job.

On a CUDA device memory ends with ``torch.cuda.OutOfMemoryError`` inside the process (the
container lives on), so the job's script finds its own limit: ``largest_batch(step_fn, lo,
hi)`` runs ``step_fn(b)`` (one forward and backward pass at local batch ``b``), catches
the error, halves and bisects (``flowcon.core.batch_search.largest_fitting``) and returns
the largest ``b`` that ran. ``report_largest_batch`` prints it as a metric line
(``{"max_local_batch": b}``) for the pre-run (``profile: auto``) to read into the job's
record. On CPU the kernel's OOM killer ends the container instead: the pre-run finds that
limit from the engine (flowcon/executor/profiling.py).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from flowcon.core.batch_search import MAX_LOCAL_BATCH_KEY, largest_fitting


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` says a step ran out of memory: ``torch.cuda.OutOfMemoryError``
    (or torch's older RuntimeError "CUDA out of memory"), or Python's ``MemoryError``."""
    if isinstance(exc, MemoryError):
        return True
    try:
        import torch
    except ImportError:  # pragma: no cover - the job's image has torch
        return False
    oom = getattr(torch.cuda, "OutOfMemoryError", None)
    if oom is not None and isinstance(exc, oom):
        return True
    return isinstance(exc, RuntimeError) and "out of memory" in str(exc)


def _free_memory() -> None:
    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:  # pragma: no cover
        pass


def largest_batch(
    step_fn: Callable[[int], Any],
    lo: int,
    hi: int,
    is_oom: Callable[[BaseException], bool] = is_out_of_memory,
) -> int | None:
    """The largest local batch in [``lo``, ``hi``] at which ``step_fn(batch)`` runs without
    running out of memory (None: not even ``lo``). Other errors propagate. The memory the
    failed try held is released (``torch.cuda.empty_cache``) before the next one."""

    def fits(batch: int) -> bool:
        try:
            step_fn(batch)
        except Exception as exc:
            if not is_oom(exc):
                raise
            _free_memory()
            return False
        return True

    return largest_fitting(lo, hi, fits)


def report_largest_batch(batch: int | None, report: Callable[..., None]) -> None:
    """Print the probe's result as a metric line (``report`` is ``Elastic.report`` or
    ``flowcon.report``); nothing when nothing fit."""
    if batch is not None:
        report(**{MAX_LOCAL_BATCH_KEY: int(batch)})
