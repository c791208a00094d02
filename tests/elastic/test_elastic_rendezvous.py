"""flowcon.elastic.rendezvous: the per-step decision and the store protocol (a dict store)."""

from __future__ import annotations

import threading

import pytest

pytest.importorskip("torch")

from flowcon import contract
from flowcon.elastic import rendezvous as rdv


class DictStore:
    """The torch Store calls the protocol uses (no ``check``: torch 1.13 lacks it), over a
    dict (thread-safe)."""

    def __init__(self) -> None:
        self.d: dict[str, bytes] = {}
        self.lock = threading.Lock()

    def set(self, key: str, value: str | bytes) -> None:
        with self.lock:
            self.d[key] = value.encode() if isinstance(value, str) else value

    def get(self, key: str) -> bytes:
        with self.lock:
            return self.d[key]

    def add(self, key: str, amount: int) -> int:
        with self.lock:
            n = int(self.d.get(key, b"0")) + amount
            self.d[key] = str(n).encode()
            return n

    def compare_set(self, key: str, expected: str, desired: str) -> bytes:
        with self.lock:
            cur = self.d.get(key)
            if (cur is None and expected == "") or cur == expected.encode():
                self.d[key] = desired.encode()
            return self.d[key]


def test_vote_row_round_trip() -> None:
    v = rdv.Vote(leave=True, step_time=0.25, ready=2, target=4, global_batch=64)
    assert rdv.Vote.from_row(v.row()) == v
    v = rdv.Vote(leave=True, leave_age=0.75, settle=1.5)
    assert rdv.Vote.from_row(v.row()) == v
    with pytest.raises(ValueError, match="a vote has 10 fields"):
        rdv.Vote.from_row([0.0])


def test_decide() -> None:
    calm = [rdv.Vote(), rdv.Vote()]
    assert not rdv.decide(calm).switch
    assert rdv.decide([rdv.Vote(), rdv.Vote(stop=True)]).stop
    # joiners wait until running + ready reach their target world
    assert rdv.decide([rdv.Vote(ready=1, target=4), rdv.Vote()]).admit == 0
    d = rdv.decide([rdv.Vote(ready=2, target=4, global_batch=32), rdv.Vote(leave=True)])
    assert (d.admit, d.leavers, d.global_batch) == (2, (1,), 32)
    # stragglers leave like leavers; the last holder stays while joiners come in
    assert rdv.decide(calm, removed=[1]).leavers == (1,)
    d = rdv.decide([rdv.Vote(leave=True, ready=1, target=2)])
    assert d.leavers == ()
    assert d.admit == 1
    assert rdv.decide([rdv.Vote(leave=True), rdv.Vote(leave=True)]).leavers == (0, 1)


def test_leave_requests_of_one_scale_in_settle_and_go_together() -> None:
    """A CI failure: a 4 -> 2 scale-in signalled its two leavers one after the
    other and the job ran at 3 in between. Requests wait until the oldest is rank 0's
    ``settle`` old, then all that are there go at once."""
    lead = rdv.Vote(settle=1.0)
    # the first leaver's request is young: nobody leaves yet, nothing is lost
    d = rdv.decide([lead, rdv.Vote(leave=True, leave_age=0.3), rdv.Vote(), rdv.Vote()])
    assert not d.switch
    # the second arrived meanwhile; once the first is 1 s old, both go at this boundary
    votes = [lead, rdv.Vote(leave=True, leave_age=1.02), rdv.Vote(leave=True, leave_age=0.7)]
    assert rdv.decide([*votes, rdv.Vote()]).leavers == (1, 2)
    # a lone request goes once it is settle old; settle 0 is the next boundary
    assert rdv.decide([lead, rdv.Vote(leave=True, leave_age=1.0)]).leavers == (1,)
    assert rdv.decide([rdv.Vote(), rdv.Vote(leave=True)]).leavers == (1,)
    # rank 0's window counts (another rank's value is ignored), rank 0 may be the leaver
    assert rdv.decide([rdv.Vote(), rdv.Vote(leave=True, settle=9.0)]).leavers == (1,)
    d = rdv.decide([rdv.Vote(leave=True, leave_age=0.2, settle=1.0), rdv.Vote()])
    assert not d.switch
    # stop and straggler removal do not wait; a joiner admission does not grant a young leave
    assert rdv.decide([lead, rdv.Vote(leave=True, leave_age=0.1, stop=True)]).stop
    assert rdv.decide([lead, rdv.Vote()], removed=[1]).leavers == (1,)
    d = rdv.decide([rdv.Vote(settle=1.0, ready=1, target=3), rdv.Vote(leave=True, leave_age=0.1)])
    assert (d.admit, d.leavers) == (1, ())


def test_leave_settle_from_the_environment() -> None:
    pytest.importorskip("torch")
    from flowcon.elastic.stopfree_env import LEAVE_SETTLE_DEFAULT_S, leave_settle_from_env

    assert leave_settle_from_env({}) == LEAVE_SETTLE_DEFAULT_S == 1.0
    assert leave_settle_from_env({contract.ENV_LEAVE_SETTLE_S: "0"}) == 0.0
    assert leave_settle_from_env({contract.ENV_LEAVE_SETTLE_S: " 2.5 "}) == 2.5
    for bad in ("-1", "soon", "nan", "inf"):
        with pytest.raises(ValueError, match="FLOWCON_LEAVE_SETTLE_S"):
            leave_settle_from_env({contract.ENV_LEAVE_SETTLE_S: bad})


def test_new_rank_keeps_the_order_of_stayers() -> None:
    assert [rdv.new_rank(r, [0, 2]) for r in range(4)] == [None, 0, None, 1]


def test_joiners_register_and_get_assigned() -> None:
    store = DictStore()
    assert rdv.ready_joiners(store, 0) == ([], 0)
    s1 = rdv.register_joiner(store, rdv.Joiner("c", 4))
    store.add("flowcon/joiners", 1)  # a second joiner took a slot, description not yet there
    ready, upto = rdv.ready_joiners(store, 0)
    assert [(j.worker, j.slot) for j in ready] == [("c", 1)]
    assert upto == 1
    assert rdv.ready_joiners(store, 1) == ([], 1)
    a = rdv.Assignment(gen=3, rank=2, world_size=4, holders=2, admitted=1)
    rdv.assign(store, s1, a)
    assert rdv.wait_assignment(store, s1, 1.0) == a
    assert rdv.withdraw(store, s1) == a  # too late to withdraw: it joins
    assert rdv.wait_assignment(store, 2, 0.05) is None
    assert rdv.allocate_gen(store) == 1
    assert rdv.allocate_gen(store) == 2
    rdv.publish_next(store, 0, 2)
    assert rdv.next_gen(store, 0, 1.0) == 2
    assert not rdv.job_done(store)
    rdv.mark_done(store)
    assert rdv.job_done(store)


def test_a_withdrawn_joiner_is_skipped_but_its_slot_used_up() -> None:
    store = DictStore()
    s1 = rdv.register_joiner(store, rdv.Joiner("b", 3))
    s2 = rdv.register_joiner(store, rdv.Joiner("c", 2))
    assert rdv.withdraw(store, s1) is None
    ready, upto = rdv.ready_joiners(store, 0)
    assert [j.slot for j in ready] == [s2]
    assert upto == 2
    with pytest.raises(RuntimeError, match="withdrew"):
        rdv.assign(store, s1, rdv.Assignment(gen=1, rank=1, world_size=2, holders=1))
    d = rdv.decide([rdv.Vote(ready=1, target=2, upto=2)])
    assert (d.admit, d.upto) == (1, 2)


def test_agreed_step_is_the_newest_common_snapshot() -> None:
    survivors = [rdv.Survivor(0, "a", (9, 10)), rdv.Survivor(2, "c", (8, 9))]
    assert rdv.agreed_step(survivors) == 9
    with pytest.raises(RuntimeError):
        rdv.agreed_step([rdv.Survivor(0, "a", (5,)), rdv.Survivor(1, "b", (7,))])


def test_recovery_survivors_agree_on_one_membership() -> None:
    store = DictStore()
    out: dict[int, rdv.Recovery] = {}

    def survive(rank: int, snaps: tuple[int, ...]) -> None:
        out[rank] = rdv.recover(store, 5, rdv.Survivor(rank, f"w{rank}", snaps), 2, 5.0)

    threads = [
        threading.Thread(target=survive, args=(3, (11, 12))),
        threading.Thread(target=survive, args=(0, (12, 13))),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[0] == out[3]
    rec = out[0]
    assert [s.old_rank for s in rec.survivors] == [0, 3]
    assert rec.step == 12
    assert rec.rank_of(3) == 1
    assert rec.rank_of(1) is None
    # a survivor that comes after the closing gets the closed membership (without itself)
    late = rdv.recover(store, 5, rdv.Survivor(1, "w1", (12,)), 2, 0.1)
    assert late == rec
    assert late.rank_of(1) is None


def test_a_survivor_counted_but_not_yet_written_is_waited_for() -> None:
    """Regression: a survivor that had counted itself in (``add``) but not yet written its
    record was skipped by the one closing the recovery, which then had to exit ("missed
    the recovery"; seen as a flaky kill -9 test under load)."""
    store = DictStore()
    base = f"{rdv.ROOT}rec/7/"
    store.add(base + "n", 1)  # survivor w2 counted itself in ...

    def write_late() -> None:  # ... and writes its record 0.3 s later
        import json
        import time
        from dataclasses import asdict

        time.sleep(0.3)
        rdv.put(store, base + "1", json.dumps(asdict(rdv.Survivor(2, "w2", (4, 5)))))

    t = threading.Thread(target=write_late)
    t.start()
    rec = rdv.recover(store, 7, rdv.Survivor(0, "w0", (5, 6)), 2, 5.0)
    t.join()
    assert [s.worker for s in rec.survivors] == ["w0", "w2"]
    assert rec.step == 5


def test_a_straggler_removal_never_empties_the_job() -> None:
    """A scale-in stall: the stayer removed as a straggler in the vote where the other
    rank leaves must stay (the job would end with the store host still waiting)."""
    leaving = [rdv.Vote(), rdv.Vote(leave=True)]
    assert rdv.decide(leaving, removed=[0]).leavers == (1,)
    # a removal alone that would empty nothing still happens; everyone asking still ends it
    assert rdv.decide([rdv.Vote(), rdv.Vote(), rdv.Vote()], removed=[0]).leavers == (0,)
    assert rdv.decide([rdv.Vote(leave=True), rdv.Vote(leave=True)], removed=[0]).leavers == (
        0,
        1,
    )


def test_a_straggler_removal_counts_settling_leave_requests() -> None:
    """A removal in the settle window: the stayer removed while the other rank's request
    settles must stay (the job would be left to the leaver alone, which then goes too), and
    a straggler that asked to leave goes with its scale-in, not alone before it."""
    lead = rdv.Vote(settle=1.0)
    young = rdv.Vote(leave=True, leave_age=0.2)
    assert not rdv.decide([lead, young], removed=[0]).switch
    assert rdv.decide([lead, rdv.Vote(leave=True, leave_age=1.0)], removed=[0]).leavers == (1,)
    assert not rdv.decide([lead, young, rdv.Vote(), rdv.Vote()], removed=[1]).switch
    # a removal of a rank that did not ask still goes at once
    assert rdv.decide([lead, young, rdv.Vote(), rdv.Vote()], removed=[2]).leavers == (2,)
