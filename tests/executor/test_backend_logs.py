"""``flowcon.executor.backend.log_lines_of``/``engine_since``: the engine's timestamped log
output as the lines ``flowcon logs`` pages through (pure: bytes in, lines out)."""

from __future__ import annotations

from flowcon.executor.backend import LOG_LINE_MAX_BYTES, LogLine, engine_since, log_lines_of

T0 = 1_795_000_000  # a whole second


def stamp(sec: int, ns: int, text: str) -> bytes:
    import datetime as dt

    t = dt.datetime.fromtimestamp(sec, tz=dt.UTC)
    return f"{t:%Y-%m-%dT%H:%M:%S}.{ns:09d}Z {text}\n".encode()


def test_lines_carry_their_nanosecond_timestamps_and_page_after_a_cursor():
    raw = stamp(T0, 1, "first") + stamp(T0, 999_999_999, "second") + stamp(T0 + 1, 5, "third")
    lines = log_lines_of(raw)
    assert lines == [
        LogLine(T0 * 10**9 + 1, "first"),
        LogLine(T0 * 10**9 + 999_999_999, "second"),
        LogLine((T0 + 1) * 10**9 + 5, "third"),
    ]
    # the cursor is the last line's timestamp: the next page starts after it, exactly
    assert [ln.text for ln in log_lines_of(raw, lines[0].ts_ns)] == ["second", "third"]
    assert log_lines_of(raw, lines[-1].ts_ns) == []
    # the engine is asked from the cursor's whole second (its since is inclusive)
    assert engine_since(lines[1].ts_ns) == T0
    assert engine_since(0) is None


def test_odd_output_is_kept_readable():
    long = "x" * (LOG_LINE_MAX_BYTES + 10)
    raw = stamp(T0, 0, "carriage\r") + stamp(T0, 1, long) + stamp(T0, 2, "caf\xe9")
    raw += stamp(T0, 3, "no newline at the end")[:-1]
    lines = log_lines_of(raw.replace("caf\xe9".encode(), b"caf\xff"))
    assert lines[0].text == "carriage"
    assert lines[1].text == f"[a line of {LOG_LINE_MAX_BYTES + 10} bytes]"
    assert lines[2].text == "caf\ufffd"
    assert len(lines) == 3  # a trailing partial line waits for its newline (next page)
