"""Parse the metric lines a training job prints (flowcon.report).

This is the only parser of metric lines: the agent (growth efficiency), the allocator
(progress and steps per second of its jobs) and the replay (the last step and loss of a
job) all read lines through ``parse_line`` or ``step_points``. Turning the engine's log
output into lines (bounded in length) is ``flowcon.engine.logs``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

import regex as _regex

from flowcon.contract import LINE_EVENT, LINE_STEP, LINE_THREADS, LINE_TS

# A job's own metric regex (flowcon.metric.regex, a job spec's metric.regex) is compiled
# with the ``regex`` package, whose matching takes a time limit: a pattern built to
# backtrack (``(a+)+$``) on a long line would otherwise hold a CPU for minutes.
MetricRegex = _regex.Pattern[str]
RegexError = _regex.error
REGEX_TIMEOUT_S = 0.05  # per line; lines are at most the agent's max_line_bytes


def compile_regex(raw: str) -> MetricRegex:
    """``raw`` compiled for ``parse_line`` (``RegexError`` if it does not compile)."""
    return _regex.compile(raw)


class LineKind(Enum):
    SAMPLE = "sample"  # a usable metric value
    TEXT = "text"  # ordinary output, not for us
    NO_METRIC = "no-metric"  # a JSON object without our key
    MALFORMED = "malformed"  # looks like JSON but is not
    NON_FINITE = "non-finite"  # NaN, inf or null: skipped
    BAD_VALUE = "bad-value"  # not a number
    REGEX_TIMEOUT = "regex-timeout"  # the job's regex ran past REGEX_TIMEOUT_S on the line


@dataclass(frozen=True)
class ParsedLine:
    kind: LineKind
    value: float | None = None
    step: int | None = None
    detail: str = ""
    ts: float | None = None  # the line's own "ts" (JSON lines), when finite
    event: bool = False  # a notice line ({"event": ...}), not a measurement
    epoch: int | None = None  # a regex's (?P<epoch>...) group, when it has one
    threads: int | None = None  # a JSON line's "threads" (thread-aware jobs), when valid


def _number(raw: object) -> float | None:
    if isinstance(raw, bool) or not isinstance(raw, int | float | str):
        return None
    try:
        return float(raw)
    except (ValueError, OverflowError):
        return None


def _step(raw: object) -> int | None:
    value = _number(raw)
    if value is None or not math.isfinite(value):
        return None
    return int(value)


def _ts(raw: object) -> float | None:
    value = _number(raw)
    return value if value is not None and math.isfinite(value) else None


def _parse_regex_line(line: str, regex: MetricRegex, timeout: float) -> ParsedLine:
    """``parse_line`` for a job's own format."""
    try:
        match = regex.search(line, timeout=timeout)
    except TimeoutError:
        return ParsedLine(LineKind.REGEX_TIMEOUT, detail=f"{len(line)} characters")
    if match is None:
        return ParsedLine(LineKind.TEXT)
    value = _number(match.group("value"))
    step = _step(match.group("step")) if "step" in regex.groupindex else None
    epoch = _step(match.group("epoch")) if "epoch" in regex.groupindex else None
    if value is None:
        return ParsedLine(LineKind.BAD_VALUE, step=step, detail=match.group("value")[:80])
    if not math.isfinite(value):
        return ParsedLine(
            LineKind.NON_FINITE, step=step, detail=match.group("value")[:80], epoch=epoch
        )
    return ParsedLine(LineKind.SAMPLE, value, step, epoch=epoch)


def _threads(raw: object) -> int | None:
    """A positive whole thread count; anything else (missing, bool, 2.5, "x") is None."""
    value = _number(raw)
    if value is None or not math.isfinite(value) or value < 1 or value != int(value):
        return None
    return int(value)


def parse_line(
    line: str,
    metric: str | None = None,
    regex: MetricRegex | None = None,
    timeout: float = REGEX_TIMEOUT_S,
) -> ParsedLine:
    """Classify one output line and extract the metric (and the step and ts when present).

    ``metric=None`` reads only the step and ts of a JSON line (kind NO_METRIC). A regex
    that runs longer than ``timeout`` seconds on the line gives kind REGEX_TIMEOUT."""
    if regex is not None:
        return _parse_regex_line(line, regex, timeout)
    text = line.strip()
    if not text.startswith("{"):
        return ParsedLine(LineKind.TEXT)
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        return ParsedLine(LineKind.MALFORMED, detail=text[:80])
    if not isinstance(obj, dict):
        return ParsedLine(LineKind.MALFORMED, detail=text[:80])
    step = _step(obj.get(LINE_STEP))
    ts = _ts(obj.get(LINE_TS))
    event = bool(obj.get(LINE_EVENT))
    threads = _threads(obj.get(LINE_THREADS))
    if metric is None or metric not in obj:
        return ParsedLine(LineKind.NO_METRIC, step=step, ts=ts, event=event, threads=threads)
    raw = obj[metric]
    value = _number(raw)
    if raw is None or value is None or not math.isfinite(value):
        # flowcon.report writes NaN/inf as null
        kind = LineKind.BAD_VALUE if raw is not None and value is None else LineKind.NON_FINITE
        detail = "null" if raw is None else repr(raw)[:80]
        return ParsedLine(kind, step=step, detail=detail, ts=ts, event=event, threads=threads)
    return ParsedLine(LineKind.SAMPLE, value, step, ts=ts, event=event, threads=threads)


def step_points(lines: Iterable[str]) -> list[tuple[int, float]]:
    """(step, ts) of every JSON metric line with a finite step and ts, in order; notice
    lines ({"event": ...}) and everything else left out."""
    out: list[tuple[int, float]] = []
    for line in lines:
        p = parse_line(line)
        if p.step is not None and p.ts is not None and not p.event:
            out.append((p.step, p.ts))
    return out


def regex_step_points(
    timed_lines: Iterable[tuple[float, str]],
    regex: MetricRegex,
    steps_per_line: float | None = None,
    steps_per_epoch: int | None = None,
) -> list[tuple[float, float]]:
    """(step, ts) of the lines ``regex`` matches (a job's own format, ``metric.regex``);
    ``ts`` is the engine's timestamp of the line (the lines carry none of their own).

    The step is the regex's ``step`` group when it has one; else its ``epoch`` group times
    ``steps_per_epoch`` (an epoch line marks that many epochs done); else the number of
    matching lines so far times ``steps_per_line`` (default 1), which counts from the
    container's start. A matching line whose value is NaN still marks a step."""
    out: list[tuple[float, float]] = []
    count = 0
    per_line = 1.0 if steps_per_line is None else steps_per_line
    for ts, line in timed_lines:
        p = parse_line(line, regex=regex)
        if p.kind in (LineKind.TEXT, LineKind.BAD_VALUE, LineKind.REGEX_TIMEOUT):
            continue
        count += 1
        if "step" in regex.groupindex:
            if p.step is None:
                continue
            step = float(p.step)
        elif "epoch" in regex.groupindex and steps_per_epoch is not None:
            if p.epoch is None:
                continue
            step = float(p.epoch * steps_per_epoch)
        else:
            step = count * per_line
        out.append((step, ts))
    return out
