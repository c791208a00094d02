"""The largest batch that fits: the search the pre-run and the job's own probe share.

Pure, no I/O: ``fits(b)`` says whether one local batch of ``b`` samples ran (False: it ran
out of memory). The search tries the largest first (``hi``), halves until a batch fits,
then bisects between the last fit and the first failure above it, so a worker whose
limit is near ``hi`` costs one or two tries and one far below it ``log2(hi / fit)`` more.
"""

from __future__ import annotations

from collections.abc import Callable

# the key of the metric line a job's probe prints (``{"max_local_batch": 48}``) and of the
# pre-run's result in the job's record
MAX_LOCAL_BATCH_KEY = "max_local_batch"


def largest_fitting(lo: int, hi: int, fits: Callable[[int], bool]) -> int | None:
    """The largest ``b`` in [``lo``, ``hi``] with ``fits(b)``, assuming a batch that fits
    has every smaller one fitting too; None when even ``lo`` does not fit. ``fits`` is
    called at most once per batch."""
    if lo < 1 or hi < lo:
        raise ValueError(f"need 1 <= lo <= hi, got lo={lo}, hi={hi}")
    tried: dict[int, bool] = {}

    def ok(b: int) -> bool:
        if b not in tried:
            tried[b] = bool(fits(b))
        return tried[b]

    if ok(hi):
        return hi
    bad, b = hi, hi
    while True:  # halve until one fits
        b = max(lo, b // 2)
        if ok(b):
            good = b
            break
        if b == lo:
            return None
        bad = b
    while bad - good > 1:  # bisect (good fits, bad does not)
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good
