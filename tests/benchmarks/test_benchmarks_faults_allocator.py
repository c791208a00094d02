"""benchmarks/faults_allocator.py's checks without an engine."""

from __future__ import annotations

import logging
import os
import random
from types import ModuleType

import pytest


def _module() -> ModuleType:
    from benchmarks.faults import allocator

    return allocator


def test_the_step_check_sees_a_checkpoint_that_went_back() -> None:
    faults = _module()
    poller = faults.StepPoller(None, "x")
    seen = faults.Seen
    poller.seen = {
        "a": seen("j", 0, 4, 1.0, 0, 40),
        "b": seen("j", 1, 4, 1.1, 0, None),  # not rank 0: not compared
        "c": seen("j", 0, 2, 2.0, 40 - faults.REPEAT_SLACK, 60),  # within one interval
        "d": seen("k", 0, 2, 2.0, 0, 5),
    }
    assert poller.regressions() == []
    poller.seen["e"] = seen("j", 0, 4, 3.0, 10, 12)  # restarted far behind step 60
    (problem,) = poller.regressions()
    assert problem.startswith("j: a container started from step 10")
    assert "printed 60" in problem


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting the scenario's tmpfs needs root")
def test_a_full_store_disk_refuses_with_507_changes_nothing_and_recovers(
    caplog: pytest.LogCaptureFixture,
) -> None:
    faults = _module()
    with (
        caplog.at_level(logging.ERROR),
        faults.allocator_disk_full_session(random.Random(0)) as run,
    ):
        for i in range(2):
            problems, took = run(i)
            assert problems == [], problems
            assert took is not None
            assert took < 5
    assert "Traceback" not in caplog.text
    assert "store cannot be written: database or disk is full" in caplog.text
