"""The one poll of the tests: wait until a condition holds, or fail the test."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest


def wait_for(
    pred: Callable[[], Any],
    timeout: float = 30.0,
    every: float = 0.25,
    what: str | Callable[[], str] = "the condition",
) -> Any:
    """Poll ``pred()`` every ``every`` s until it is truthy and return its value; past
    ``timeout`` s, fail the test naming ``what`` (a callable is asked at that moment, so
    the message can say what the state was then)."""
    end = time.monotonic() + timeout
    while True:
        value = pred()
        if value:
            return value
        if time.monotonic() > end:
            said = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout}s waiting for {said}")
        time.sleep(every)
