"""The coordinator's store protocol, pure (in-memory stores): generation ids above another
store's, the successor of a leaving coordinator, the election's order, the hand-over keys."""

from __future__ import annotations

import threading

import pytest
from test_elastic_rendezvous import DictStore

from flowcon.elastic import rendezvous as rdv


def test_allocate_gen_stays_above_the_floor_and_unique() -> None:
    s = DictStore()
    assert rdv.allocate_gen(s) == 1
    assert rdv.allocate_gen(s, floor=7) == 8
    assert rdv.allocate_gen(s, floor=3) == 9  # already above
    fresh = DictStore()
    got: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        g = rdv.allocate_gen(fresh, floor=5)
        with lock:
            got.append(g)

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(got)) == 8
    assert min(got) > 5


def test_successor_and_candidates_follow_the_rank_order() -> None:
    stores = ("a:1", "b:1", "", "d:1")
    assert rdv.coordinator_rank(stores, "a:1") == 0
    assert rdv.coordinator_rank(stores, "x:1") is None
    assert rdv.successor(stores, [0]) == "b:1"
    assert rdv.successor(stores, [0, 1]) is None  # the first stayer hosts none: no move
    assert rdv.successor(stores, [0, 1, 2]) == "d:1"
    assert rdv.candidates(stores, "a:1") == ["b:1", "d:1"]
    assert rdv.split_addr("flowcon-j--n-w1:29500") == ("flowcon-j--n-w1", 29500)
    with pytest.raises(ValueError, match="host:port"):
        rdv.split_addr("nohost")


def test_elect_takes_the_first_store_that_answers() -> None:
    live = {"c:1": DictStore(), "d:1": DictStore()}

    def connect(addr: str) -> rdv.Store:
        if addr not in live:
            raise ConnectionError(f"{addr} is gone")
        return live[addr]

    addr, store = rdv.elect(("a:1", "b:1", "c:1", "d:1"), "a:1", connect)
    assert addr == "c:1"  # b died with a
    assert store is live["c:1"]
    assert rdv.coordinator_addr(store) == "c:1"
    assert rdv.is_coordinator(store)
    with pytest.raises(RuntimeError, match="no member store answers"):
        rdv.elect(("a:1", "b:1"), "a:1", connect)


def test_hand_over_publishes_the_next_generation_on_the_new_store() -> None:
    old, new = DictStore(), DictStore()
    rdv.mark_coordinator(old, "a:1")
    for _ in range(4):
        rdv.allocate_gen(old)  # ids 1..4 used on the old store
    nxt = rdv.hand_over(old, new, "b:1", gen=4)
    assert nxt == 5
    assert rdv.next_gen(new, 4, timeout_s=1.0) == 5
    assert rdv.coordinator_addr(new) == "b:1"
    assert rdv.is_coordinator(old)  # until the move is marked
    assert rdv.moved_to(old) is None
    rdv.mark_moved(old, "b:1")
    assert rdv.moved_to(old) == "b:1"
    assert not rdv.is_coordinator(old)
    assert rdv.was_coordinator(old)
    assert rdv.is_coordinator(new)
