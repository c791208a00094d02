"""A guarantee the ledger can no longer keep is given up at admission, not held against
newcomers (``SlotLedger.try_admit``'s ``revoked``; beyond the ElasticFlow paper).

Found on the shared traces: an admitted job that fell behind its reservation
(restart overheads beyond the admission margin) and could not be re-planned kept its stale
reservation, and every later arrival that needed that room was declined "would violate the
deadline of admitted job X", although X missed its deadline anyway (on cluster02 in the
published world, 8 such jobs declined 474 arrivals)."""

from __future__ import annotations

from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.alloc.types import ClusterState
from flowcon.policy_registry import make_policy
from flowcon.sim.engine import Simulator
from flowcon.sim.outputs import summarize

LINEAR4 = ThroughputCurve({1: 1.0, 2: 2.0, 4: 4.0})


def _job(jid: str, iters: float, deadline: float, submit: float = 0.0) -> Job:
    return Job(job_id=jid, submit_time=submit, iterations=iters, deadline=deadline, curve=LINEAR4)


def _ledger_with_a() -> tuple[SlotLedger, Job]:
    """4 GPUs, 60 s slots; job A (2,400 iterations by t=1,200) admitted at t=0: 2 GPUs in
    every slot (its minimum satisfactory share)."""
    ledger = SlotLedger(4, 60.0)
    a = _job("a", 2400.0, 1200.0)
    assert ledger.try_admit(a, {"a": a}, 0.0).admitted
    assert ledger.share("a", 0.0) == 2
    return ledger, a


def test_a_job_that_cannot_meet_its_deadline_any_more_gives_up_its_guarantee() -> None:
    ledger, a = _ledger_with_a()
    # t=660 and A has done nothing (its restarts ate the time): 2,400 iterations in 540 s
    # need more than the 4 GPUs there are, so no plan meets its deadline any more
    b = _job("b", 1944.0, 1200.0, submit=660.0)  # needs more than the 2 GPUs A leaves
    d = ledger.try_admit(b, {"a": a, "b": b}, 660.0)
    assert d.admitted
    assert d.revoked == ("a",)
    assert "a" not in ledger
    assert "b" in ledger
    plan = ledger.plan_of("b")
    assert plan is not None
    assert max(plan.gpus) == 4  # the room A held


def test_a_job_on_track_keeps_its_guarantee_and_the_newcomer_is_declined() -> None:
    ledger, a = _ledger_with_a()
    a.done_iterations = 1320.0  # 2 it/s since t=0: exactly its plan
    b = _job("b", 1944.0, 1200.0, submit=660.0)
    d = ledger.try_admit(b, {"a": a, "b": b}, 660.0)
    assert not d.admitted
    assert d.revoked == ()
    assert "a" in ledger
    assert "b" not in ledger


def test_a_job_behind_that_can_be_replanned_keeps_its_guarantee() -> None:
    ledger, a = _ledger_with_a()
    # behind its plan (1,000 of the 1,320 planned) but 1,400 iterations still fit in
    # 540 s on 4 GPUs: re-planned, not given up; the newcomer does not fit beside it
    a.done_iterations = 1000.0
    b = _job("b", 1944.0, 1200.0, submit=660.0)
    d = ledger.try_admit(b, {"a": a, "b": b}, 660.0)
    assert not d.admitted
    assert d.revoked == ()
    assert "a" in ledger


def test_the_guarantee_is_given_up_even_when_the_newcomer_still_does_not_fit() -> None:
    ledger, a = _ledger_with_a()
    b = _job("b", 10_000.0, 1200.0, submit=660.0)  # impossible even alone
    d = ledger.try_admit(b, {"a": a, "b": b}, 660.0)
    assert not d.admitted
    assert d.revoked == ("a",)
    assert d.reason is not None
    assert "even alone" in d.reason
    assert "a" not in ledger


def test_the_policy_passes_the_revoked_jobs_on() -> None:
    pol = make_policy("elasticflow", overhead=0.0)
    state = ClusterState(total_gpus=4, slot=60.0)
    a = _job("a", 2400.0, 1200.0)
    assert pol.on_submit(a, 0.0, state).admitted
    state.jobs["a"] = a
    b = _job("b", 1944.0, 1200.0, submit=660.0)
    d = pol.on_submit(b, 660.0, state)
    assert d.admitted
    assert d.revoked == ("a",)
    assert set(d.plans) == {"b"}


def test_the_simulator_records_when_a_guarantee_was_lost() -> None:
    """Every start costs 300 s here and the policy planned with none: A (4,000 iterations
    by t=1,200, all 4 GPUs reserved from t=0 until its work is done, t=1,020) cannot make
    it once it has paid its start. B (1,000 iterations by t=1,200) arrives at t=660, needs
    room that only A's reservation holds (the 180 s after it give 720), and is admitted
    when A's guarantee is given up; A is then recorded as having lost it at t=660."""
    jobs = [_job("a", 4000.0, 1200.0), _job("b", 1000.0, 1200.0, submit=660.0)]
    pol = make_policy("elasticflow", overhead=0.0)
    res = Simulator(jobs, Topology(1, 4), pol, slot=60.0, overhead=300.0).run()
    by = {r.job.job_id: r for r in res.results}
    assert by["a"].guarantee_lost == 660.0
    assert by["b"].guarantee_lost is None
    assert by["b"].admitted
    assert not by["a"].met_deadline
    s = summarize(res)
    assert s["guarantees_lost"] == 1
    assert s["guarantees_lost_met"] == 0
