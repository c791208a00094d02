"""flowcon/core/metric_lines.py: the "threads" field of thread-aware jobs' lines."""

from __future__ import annotations

import pytest

from flowcon.core.metric_lines import LineKind, parse_line


def test_threads_is_kept_on_every_kind_of_json_line() -> None:
    p = parse_line('{"step": 3, "loss": 0.5, "threads": 2}', "loss")
    assert (p.kind, p.value, p.threads) == (LineKind.SAMPLE, 0.5, 2)
    assert parse_line('{"step": 3, "threads": 4}', "loss").threads == 4  # no metric
    assert parse_line('{"step": 3, "threads": 4}').threads == 4  # steps only
    p = parse_line('{"loss": null, "threads": 1}', "loss")
    assert (p.kind, p.threads) == (LineKind.NON_FINITE, 1)
    p = parse_line('{"loss": "x", "threads": 1}', "loss")
    assert (p.kind, p.threads) == (LineKind.BAD_VALUE, 1)


@pytest.mark.parametrize(
    "raw",
    ['"2"', "2.0", "2e0"],  # numbers as the other fields read them
)
def test_threads_as_a_whole_number(raw: str) -> None:
    assert parse_line(f'{{"loss": 1, "threads": {raw}}}', "loss").threads == 2


@pytest.mark.parametrize("raw", ["0", "-2", "2.5", "true", "null", '"many"', "[2]", "1e400", "NaN"])
def test_bad_threads_are_ignored_not_fatal(raw: str) -> None:
    p = parse_line(f'{{"loss": 1.5, "threads": {raw}}}', "loss")
    assert p.kind is LineKind.SAMPLE
    assert p.value == 1.5
    assert p.threads is None


def test_missing_threads_and_regex_lines() -> None:
    assert parse_line('{"loss": 1}', "loss").threads is None
    assert parse_line("threads 2 loss 1", "loss").threads is None
