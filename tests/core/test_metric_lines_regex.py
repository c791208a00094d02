"""A job's own format: steps from a regex's step group, epochs, or counted lines."""

from __future__ import annotations

import time

from flowcon.core.labels import compile_metric_regex
from flowcon.core.metric_lines import LineKind, parse_line, regex_step_points

STEP = compile_metric_regex(
    r"Epoch (?P<epoch>\d+) \| Step (?P<step>\d+) \| loss (?P<value>[0-9.eE+-]+|nan)"
)
LINES = [
    (10.0, "starting"),
    (11.0, "Epoch 0 | Step 40 | loss 0.91"),
    (12.0, "Epoch 1 | Step 80 | loss 0.52"),
    (12.5, "warning: something"),
    (13.0, "Epoch 2 | Step 120 | loss nan"),
    (14.0, "Epoch 3 | Step 160 | loss 0.41"),
]


def test_parse_line_reads_step_and_epoch_groups() -> None:
    p = parse_line("Epoch 3 | Step 120 | loss 0.41", regex=STEP)
    assert (p.kind, p.value, p.step, p.epoch) == (LineKind.SAMPLE, 0.41, 120, 3)
    assert parse_line("nothing", regex=STEP).kind is LineKind.TEXT


def test_step_group_gives_the_step() -> None:
    assert regex_step_points(LINES, STEP) == [
        (40.0, 11.0),
        (80.0, 12.0),
        (120.0, 13.0),  # a NaN loss still marks its step
        (160.0, 14.0),
    ]


def test_epochs_times_steps_per_epoch() -> None:
    epochs = compile_metric_regex(r"Epoch (?P<epoch>\d+) .*loss (?P<value>\S+)")
    pts = regex_step_points(LINES, epochs, steps_per_epoch=40)
    assert pts == [(0.0, 11.0), (40.0, 12.0), (80.0, 13.0), (120.0, 14.0)]


def test_counted_lines_times_steps_per_line() -> None:
    plain = compile_metric_regex(r"loss (?P<value>\S+)")
    assert regex_step_points(LINES, plain, steps_per_line=40) == [
        (40.0, 11.0),
        (80.0, 12.0),
        (120.0, 13.0),
        (160.0, 14.0),
    ]
    assert [s for s, _ in regex_step_points(LINES, plain)] == [1.0, 2.0, 3.0, 4.0]


def test_a_value_that_is_no_number_is_no_step() -> None:
    rx = compile_metric_regex(r"loss (?P<value>\S+)")
    assert regex_step_points([(1.0, "loss abc"), (2.0, "loss 0.5")], rx) == [(1.0, 2.0)]


def test_a_regex_built_to_backtrack_is_cut_off_by_the_time_limit() -> None:
    """(a|aa)+$ on 60 a's and a b tries every split of the a's (Fibonacci(60) ways)
    before it fails; the limit stops it."""
    rx = compile_metric_regex(r"(?P<value>(a|aa)+)$")
    t0 = time.monotonic()
    p = parse_line("a" * 60 + "b", regex=rx, timeout=0.02)
    took = time.monotonic() - t0
    assert p.kind is LineKind.REGEX_TIMEOUT
    assert p.detail == "61 characters"
    assert took < 2.0  # the limit, not the pattern, ended it (unbounded: hours)
    # An ordinary line and pattern are untouched by the limit.
    assert parse_line("aa", regex=rx).kind is LineKind.BAD_VALUE
    assert regex_step_points([(1.0, "a" * 60 + "b")], rx) == []
