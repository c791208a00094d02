"""``python3 -m benchmarks.faults`` (or ``python3 benchmarks/faults.py``): the fault
injection benchmark, its options in ``scenarios.main``."""

from __future__ import annotations

import logging
import signal
import sys

from flowcon.interrupts import raise_interrupt_once

from .scenarios import main

if __name__ == "__main__":
    logging.basicConfig(level=logging.CRITICAL)  # the server logs refused calls at DEBUG
    # SIGTERM as Ctrl-C: the running session's clean-up (its finally blocks) removes what it
    # created; a second signal meanwhile is ignored so that clean-up runs to its end
    signal.signal(signal.SIGTERM, raise_interrupt_once)
    signal.signal(signal.SIGINT, raise_interrupt_once)
    try:
        sys.exit(main())
    except KeyboardInterrupt as exc:
        print(f"interrupted ({exc or 'SIGINT'}): what it created was removed", file=sys.stderr)
        sys.exit(130)
