"""The container monitor's metric reading: a job's regex that backtracks is switched off
after a few timed-out lines, with one error line, and the rest of the job's output is
not matched again."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, cast

import pytest

from flowcon.agent import monitor as monitor_mod
from flowcon.agent.monitor import REGEX_TIMEOUTS_MAX, ContainerMonitor
from flowcon.core.growth import GrowthTracker
from flowcon.core.labels import parse_policy
from flowcon.engine.logs import Line
from flowcon.engine.protocol import Engine


class Lines:
    """The one engine call the monitor's log reading makes."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def log_lines(
        self, cid: str, since_ns: int | None, tail: int | None, max_bytes: int
    ) -> Iterator[Line]:
        for i, text in enumerate(self.texts, 1):
            yield Line(i * 1_000_000_000, text, len(text))


def _monitor(labels: dict[str, str]) -> ContainerMonitor:
    policy = parse_policy({"flowcon.enable": "true", **labels})
    assert policy is not None
    return ContainerMonitor("c1", "job", policy, GrowthTracker(), host_cpus=2)


def test_backtracking_regex_is_switched_off(monkeypatch: pytest.MonkeyPatch, caplog: Any) -> None:
    calls: list[float] = []
    real = monitor_mod.parse_line  # type: ignore[attr-defined]

    def parse(line: str, metric: str | None = None, regex: Any = None) -> Any:
        calls.append(1)
        return real(line, metric, regex, timeout=0.01)

    monkeypatch.setattr(monitor_mod, "parse_line", parse)
    mon = _monitor({"flowcon.metric.regex": r"(?P<value>(a|aa)+)$"})
    engine = cast(Engine, Lines(["a" * 60 + "b"] * 10 + ["aa"]))
    with caplog.at_level(logging.ERROR, logger="flowcon.agent.monitor"):
        assert mon.read_logs(engine) == 0
    assert mon.regex_off
    assert len(calls) == REGEX_TIMEOUTS_MAX  # not one more line matched
    assert mon.progress.skipped == {"regex-timeout": REGEX_TIMEOUTS_MAX}
    errors = [r for r in caplog.records if "metric regex switched off" in r.getMessage()]
    assert len(errors) == 1


def test_a_good_regex_reads_samples() -> None:
    mon = _monitor({"flowcon.metric.regex": r"loss (?P<value>[0-9.]+)"})
    engine = cast(Engine, Lines(["loss 0.9", "noise", "loss 0.5"]))
    assert mon.read_logs(engine) == 2
    assert not mon.regex_off
    assert mon.progress.value == 0.5
