"""flowcon.web.history: the bounded ring buffer."""

from __future__ import annotations

import pytest

from flowcon.web.history import History


def test_bounded_and_since() -> None:
    h = History(3)
    for i in range(5):
        h.append(float(i), value=i)
    assert len(h) == 3
    assert h.maxlen == 3
    assert [p["value"] for p in h.points()] == [2, 3, 4]
    assert [p["ts"] for p in h.points(since=3.0)] == [4.0]
    pts = h.points()
    pts.clear()  # a copy
    assert len(h.points()) == 3


def test_maxlen_must_be_positive() -> None:
    with pytest.raises(ValueError, match="maxlen must be >= 1"):
        History(0)
