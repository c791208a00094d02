"""SIGTERM handled like Ctrl-C, so the ``finally`` blocks that remove what a command created
run on either (``flowcon replay``, the benchmarks), and a cleanup that must finish."""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from types import FrameType


def raise_interrupt(signum: int, frame: FrameType | None) -> None:
    """A signal handler: the signal becomes a KeyboardInterrupt in the main thread."""
    raise KeyboardInterrupt(f"signal {signum}")


def raise_interrupt_once(signum: int, frame: FrameType | None) -> None:
    """Like ``raise_interrupt``, and later SIGINT/SIGTERM are ignored: the cleanup the
    first one starts (``finally`` blocks all the way up) runs to its end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def cleanup_guard() -> Iterator[None]:
    """The cleanup runs to its end: a SIGINT/SIGTERM meanwhile is held, raised after."""
    pending: list[int] = []
    old = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in old:
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    if pending:
        raise KeyboardInterrupt(f"signal {pending[0]}")
