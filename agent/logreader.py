"""Turn the engine's timestamped log frames into whole lines, incrementally.

The engine (json-file/local drivers) splits a line longer than 16 KiB into several
frames without a newline, each carrying the line's timestamp; a TTY container gives
arbitrary chunks with a timestamp at each line start. Both are handled: a timestamp
is stripped at every line start, and at a frame start that continues a line.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from flowcon.core.metric_lines import LineAssembler

_TS = re.compile(rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)(?:\.(\d{1,9}))?Z ")


def parse_ts(raw: bytes) -> tuple[int, int] | None:
    """(nanoseconds since the epoch, bytes consumed) for a leading RFC 3339 UTC timestamp."""
    match = _TS.match(raw)
    if match is None:
        return None
    y, mo, d, h, mi, s = (int(g) for g in match.groups()[:6])
    frac = match.group(7) or b""
    nanos = int(frac.ljust(9, b"0")) if frac else 0
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    return secs * 1_000_000_000 + nanos, match.end()


@dataclass(frozen=True)
class Line:
    ts_ns: int
    text: str | None  # None: the line was longer than the bound and was dropped
    size: int


def read_lines(frames: Iterable[bytes], max_bytes: int, after_ns: int = 0) -> Iterator[Line]:
    """Complete lines with timestamps > ``after_ns`` (a trailing partial line is dropped)."""
    asm = LineAssembler(max_bytes)
    ts_ns = 0
    at_line_start = True
    for frame in frames:
        pos = 0
        n = len(frame)
        first = True
        while pos < n:
            if at_line_start or first:
                parsed = parse_ts(frame[pos : pos + 40])
                if parsed is not None:
                    if at_line_start:
                        ts_ns = parsed[0]
                    pos += parsed[1]
            first = False
            nl = frame.find(b"\n", pos)
            if nl < 0:
                asm.feed(frame[pos:])
                at_line_start = False
                break
            asm.feed(frame[pos:nl])
            raw, size = asm.end_line()
            at_line_start = True
            pos = nl + 1
            if ts_ns <= after_ns:
                continue
            text = None if raw is None else raw.decode("utf-8", "replace").rstrip("\r")
            yield Line(ts_ns, text, size)
