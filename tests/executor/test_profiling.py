"""Reading a worker's metric points: JSON lines, or the job's own format timed by the engine."""

from __future__ import annotations

from typing import Any

import pytest

from flowcon.executor.backend import ExecutorError, LogLine, Worker
from flowcon.executor.profiling import rate_of, worker_points
from flowcon.jobspec.keys import MetricSpec


class LogsOnly:
    """A backend whose only working calls are the two log reads (which one was asked, and
    whether it asked for stderr and timestamps, is recorded as (timestamps, stderr))."""

    def __init__(self, stdout: list[str], stderr: list[str]) -> None:
        self.stdout, self.stderr = stdout, stderr
        self.asked: list[tuple[bool, bool]] = []

    def logs(self, worker: Worker) -> list[str]:
        self.asked.append((False, False))
        return self.stdout

    def read_logs(self, worker: Worker) -> list[LogLine]:
        """stdout and stderr, one line a second from 2026-01-01T00:00:00.5Z."""
        self.asked.append((True, True))
        lines = self.stdout + self.stderr
        return [LogLine(int(T0 * 1e9) + i * 10**9, ln) for i, ln in enumerate(lines)]


W = Worker("id", "n", "j", "node1", 0, ("0",), "running", None, {}, "img")
T0 = 1767225600.5  # 2026-01-01T00:00:00.5Z


def test_own_format_with_the_engine_failing_is_no_points() -> None:
    class Failing(LogsOnly):
        def read_logs(self, worker: Worker) -> list[LogLine]:
            raise ExecutorError("logs of n: engine gone")

    m = MetricSpec("loss", r"Step (?P<step>\d+) \| loss (?P<value>\S+)")
    assert worker_points(Failing(["Step 1 | loss 1"], []), W, m) == []  # type: ignore[arg-type]


def test_json_lines_without_a_regex() -> None:
    b: Any = LogsOnly(['{"step": 5, "ts": 100.0}', "text", '{"step": 9, "ts": 102.0}'], [])
    assert worker_points(b, W, None) == [(5.0, 100.0), (9.0, 102.0)]
    assert worker_points(b, W, MetricSpec("loss")) == [(5.0, 100.0), (9.0, 102.0)]
    assert b.asked == [(False, False), (False, False)]


def test_own_format_on_stdout_and_stderr_timed_by_the_engine() -> None:
    out = ["Epoch 0 | Step 10 | loss 0.9", "noise", "Epoch 0 | Step 30 | loss 0.7"]
    err = ["Epoch 1 | Step 50 | loss 0.5"]  # python's logging writes to stderr
    b: Any = LogsOnly(out, err)
    m = MetricSpec("loss", r"Step (?P<step>\d+) \| loss (?P<value>\S+)")
    pts = worker_points(b, W, m)
    assert pts == [  # type: ignore[comparison-overlap]
        (10.0, pytest.approx(T0)),
        (30.0, pytest.approx(T0 + 2)),
        (50.0, pytest.approx(T0 + 3)),
    ]
    assert b.asked == [(True, True)]
    assert rate_of([(ts, s) for s, ts in pts]) == (pytest.approx(40 / 3), 3)  # type: ignore[comparison-overlap]
