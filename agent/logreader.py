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
from typing import NamedTuple

from flowcon.core.metric_lines import LineAssembler

_TS_HEAD = re.compile(rb"(\d{4})-(\d\d)-(\d\d)T(\d\d):(\d\d):(\d\d)")
_TS_TAIL = re.compile(rb"(?:\.(\d{1,9}))?Z ")


class _TimestampParser:
    """RFC 3339 UTC timestamps at a position; the whole seconds of consecutive lines
    are mostly the same, so their conversion is cached (a round reads ~2000 lines)."""

    def __init__(self) -> None:
        self._head = b""
        self._secs = 0

    def __call__(self, buf: bytes, pos: int = 0) -> tuple[int, int] | None:
        """(nanoseconds since the epoch, end position) or None."""
        head = buf[pos : pos + 19]
        if head != self._head:
            match = _TS_HEAD.fullmatch(head)
            if match is None:
                return None
            y, mo, d, h, mi, s = (int(g) for g in match.groups())
            self._secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
            self._head = head
        tail = _TS_TAIL.match(buf, pos + 19)
        if tail is None:
            return None
        frac = tail.group(1)
        nanos = int(frac.ljust(9, b"0")) if frac else 0
        return self._secs * 1_000_000_000 + nanos, tail.end()


def parse_ts(raw: bytes) -> tuple[int, int] | None:
    """(nanoseconds since the epoch, bytes consumed) for a leading RFC 3339 UTC timestamp."""
    return _TimestampParser()(raw, 0)


class Line(NamedTuple):
    ts_ns: int
    text: str | None  # None: the line was longer than the bound and was dropped
    size: int


def read_lines(frames: Iterable[bytes], max_bytes: int, after_ns: int = 0) -> Iterator[Line]:
    """Complete lines with timestamps > ``after_ns`` (a trailing partial line is dropped)."""
    asm = LineAssembler(max_bytes)
    parse = _TimestampParser()
    ts_ns = 0
    at_line_start = True
    for frame in frames:
        pos = 0
        n = len(frame)
        first = True
        while pos < n:
            if at_line_start or first:
                parsed = parse(frame, pos)
                if parsed is not None:
                    if at_line_start:
                        ts_ns = parsed[0]
                    pos = parsed[1]
            first = False
            nl = frame.find(b"\n", pos)
            if nl < 0:
                asm.feed(frame[pos:])
                at_line_start = False
                break
            raw: bytes | None
            if not asm.pending and nl - pos <= max_bytes:
                raw, size = frame[pos:nl], nl - pos  # the usual case: one whole line
            else:
                asm.feed(frame[pos:nl])
                raw, size = asm.end_line()
            at_line_start = True
            pos = nl + 1
            if ts_ns <= after_ns:
                continue
            text = None if raw is None else raw.decode("utf-8", "replace").rstrip("\r")
            yield Line(ts_ns, text, size)
