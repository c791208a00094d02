"""A joiner's store client dials again when a connection drops (flowcon/elastic/redial.py):
calls that cannot count twice are repeated on the new connection, the rest fail as before."""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
import torch.distributed as dist

from flowcon.elastic.redial import DROPPED, RedialingStore


class _Conn:
    """One connection to a shared key space; ``drops`` calls fail as a closed one does."""

    def __init__(self, data: dict[str, bytes], drops: int) -> None:
        self.data = data
        self.drops = drops

    def _maybe_drop(self) -> None:
        if self.drops > 0:
            self.drops -= 1
            raise DROPPED("Failed to recv, got 0 bytes. Connection was likely closed.")

    def get(self, key: str) -> bytes:
        self._maybe_drop()
        return self.data[key]

    def set(self, key: str, value: str | bytes) -> None:
        self._maybe_drop()
        self.data[key] = value if isinstance(value, bytes) else value.encode()

    def add(self, key: str, amount: int) -> int:
        self._maybe_drop()
        value = int(self.data.get(key, b"0")) + amount
        self.data[key] = str(value).encode()
        return value

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        self._maybe_drop()
        now = self.data.get(key, b"").decode()
        if now == expected:
            self.data[key] = desired.encode()
        return self.data[key]


def _dialer(data: dict[str, bytes], drops: list[int]) -> tuple[list[_Conn], object]:
    made: list[_Conn] = []

    def dial() -> _Conn:
        made.append(_Conn(data, drops[len(made)] if len(made) < len(drops) else 0))
        return made[-1]

    return made, dial


def test_a_read_is_repeated_on_a_new_connection() -> None:
    data = {"k": b"v", "c#": b"1"}
    made, dial = _dialer(data, [1, 0])
    store = RedialingStore(dial)  # type: ignore[arg-type]
    assert store.add("c#", 0) == 1  # rendezvous.there's read of a counter
    assert len(made) == 2
    assert store.redials_used == 1
    assert store.get("k") == b"v"
    assert store.client is made[1]


def test_set_and_compare_set_are_repeated() -> None:
    data: dict[str, bytes] = {}
    _made, dial = _dialer(data, [1, 1, 0])
    store = RedialingStore(dial)  # type: ignore[arg-type]
    store.set("a", "1")
    assert store.compare_set("b", "", "x") == b"x"
    assert data == {"a": b"1", "b": b"x"}
    assert store.redials_used == 2


def test_a_counting_add_is_not_repeated() -> None:
    data: dict[str, bytes] = {}
    made, dial = _dialer(data, [1])
    store = RedialingStore(dial)  # type: ignore[arg-type]
    with pytest.raises(DROPPED):
        store.add("joiners", 1)  # the lost call may have counted: the caller decides
    assert len(made) == 1
    assert store.redials_used == 0


def test_it_gives_up_after_its_redials() -> None:
    made, dial = _dialer({}, [1, 1, 1])
    store = RedialingStore(dial, redials=2)  # type: ignore[arg-type]
    with pytest.raises(DROPPED):
        store.get("k")
    assert len(made) == 3  # the first connection and two more, then the error


def test_a_timeout_is_not_a_drop() -> None:
    class _Slow(_Conn):
        def get(self, key: str) -> bytes:
            raise dist.DistStoreError("wait timeout")

    made: list[_Conn] = []

    def dial() -> _Conn:
        made.append(_Slow({}, 0))
        return made[-1]

    store = RedialingStore(dial)
    with pytest.raises(dist.DistStoreError):
        store.get("k")
    assert len(made) == 1
