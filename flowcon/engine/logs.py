"""Engine log output to lines: the one place bytes become lines.

Three steps, all incremental and bounded in memory:

1. ``demux_frames``: the payloads of the engine's multiplexed log stream (or a TTY
   container's raw stream);
2. timestamps: every payload starts with the line's RFC 3339 timestamp (asked for with
   ``timestamps=1``); the engine (json-file/local drivers) splits a line longer than
   16 KiB into several frames without a newline, each carrying the line's timestamp,
   and a TTY container gives arbitrary chunks with a timestamp at each line start.
   A timestamp is stripped at every line start, and at a frame start that continues
   a line;
3. ``LineAssembler``: chunks joined into lines, a line longer than the bound dropped
   whole (only its length remembered).

``read_lines`` does 2 and 3 on the frames of 1. What a line means is
``flowcon.core.metric_lines``' business, not this module's.
"""

from __future__ import annotations

import calendar
import re
from collections.abc import Callable, Iterable, Iterator
from typing import NamedTuple

_MUX_TYPES = (0, 1, 2)  # stdin, stdout, stderr frames of the engine's stream multiplexing

Read = Callable[[int], bytes]


# ----- 1. frames -------------------------------------------------------------------------


class _Buffer:
    """Bytes read from ``read`` and not consumed yet."""

    def __init__(self, read: Read, chunk: int) -> None:
        self.read = read
        self.chunk = chunk
        self.buf = b""
        self.pos = 0

    def available(self) -> int:
        return len(self.buf) - self.pos

    def fill(self, n: int) -> bool:
        """At least ``n`` unconsumed bytes; False at the end of the stream."""
        while self.available() < n:
            data = self.read(max(self.chunk, n - self.available()))
            if not data:
                return False
            self.buf = self.buf[self.pos :] + data
            self.pos = 0
        return True

    def take(self, n: int) -> bytes:
        out = self.buf[self.pos : self.pos + n]
        self.pos += len(out)
        return out


def _pieces(src: _Buffer, size: int) -> Iterator[bytes]:
    """A frame too large to hold whole, passed on as it arrives."""
    left = size
    while left:
        if not src.available():
            src.buf, src.pos = src.read(min(src.chunk, left)), 0
            if not src.buf:
                return
        piece = src.take(left)
        left -= len(piece)
        yield piece


def demux_frames(read: Read, chunk: int = 65536, max_piece: int = 1 << 20) -> Iterator[bytes]:
    """The payloads of the engine's multiplexed log stream (8-byte header: type, 0, 0, 0,
    big-endian size), read ``chunk`` bytes at a time. A container with a TTY sends a raw
    stream (no headers): recognised because with timestamps it starts with a digit, and
    passed through in chunks. A frame larger than ``max_piece`` is passed on in pieces,
    never held whole in memory. A truncated last frame is dropped."""
    src = _Buffer(read, chunk)
    src.fill(8)
    head = src.buf
    if not head:
        return
    if len(head) < 8 or head[0] not in _MUX_TYPES or head[1:4] != b"\0\0\0":
        yield head
        while data := read(chunk):
            yield data
        return
    while src.fill(8):
        size = int.from_bytes(src.take(8)[4:8], "big")
        if size > max_piece:
            yield from _pieces(src, size)
        elif src.fill(size):
            yield src.take(size)
        else:
            return


# ----- 2. timestamps ---------------------------------------------------------------------

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


# ----- 3. lines --------------------------------------------------------------------------


class LineAssembler:
    """Joins output chunks into lines, keeping at most ``max_bytes`` of one line.

    A longer line is dropped as a whole (its head is not parsed), and only its
    length is remembered, so a 10 MB line costs 64 KiB of memory, not 10 MB.
    """

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._parts: list[bytes] = []
        self._size = 0
        self._dropping = False

    def feed(self, chunk: bytes) -> None:
        if self._dropping:
            self._size += len(chunk)
            return
        self._size += len(chunk)
        if self._size > self.max_bytes:
            self._parts.clear()
            self._dropping = True
            return
        self._parts.append(chunk)

    @property
    def pending(self) -> bool:
        return self._size > 0

    def end_line(self) -> tuple[bytes | None, int]:
        """Finish the current line: (its bytes or None if it was too long, its length)."""
        size = self._size
        line = None if self._dropping else b"".join(self._parts)
        self._parts = []
        self._size = 0
        self._dropping = False
        return line, size


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
