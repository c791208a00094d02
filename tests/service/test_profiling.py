"""Reading a worker's metric points: JSON lines, or the job's own format timed by the engine."""

from __future__ import annotations

from typing import Any

import pytest

from flowcon.service.backend import Worker
from flowcon.service.jobspec_keys import MetricSpec
from flowcon.service.profiling import rate_of, split_timestamps, worker_points


class LogsOnly:
    """A backend whose only working call is ``logs`` (stdout lines; stderr/timestamps asked
    for are recorded)."""

    def __init__(self, stdout: list[str], stderr: list[str]) -> None:
        self.stdout, self.stderr = stdout, stderr
        self.asked: list[tuple[bool, bool]] = []

    def logs(self, worker: Worker, timestamps: bool = False, stderr: bool = False) -> list[str]:
        self.asked.append((timestamps, stderr))
        lines = self.stdout + (self.stderr if stderr else [])
        if timestamps:
            return [f"2026-01-01T00:00:{i:02d}.500000000Z {ln}" for i, ln in enumerate(lines)]
        return lines


W = Worker("id", "n", "j", "node1", 0, ("0",), "running", None, {}, "img")
T0 = 1767225600.5  # 2026-01-01T00:00:00.5Z


def test_split_timestamps() -> None:
    got = split_timestamps(
        ["2026-01-01T00:00:00.5Z hello world", "no stamp", "2026-01-01T00:00:01Z x"]
    )
    assert got == [(pytest.approx(T0), "hello world"), (pytest.approx(T0 + 0.5), "x")]


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
    assert pts == [
        (10.0, pytest.approx(T0)),
        (30.0, pytest.approx(T0 + 2)),
        (50.0, pytest.approx(T0 + 3)),
    ]
    assert b.asked == [(True, True)]
    assert rate_of([(ts, s) for s, ts in pts]) == (pytest.approx(40 / 3), 3)
