"""``Planner.dry_run`` (``flowcon submit --dry-run``): the policy's answer on a copy of the
planner's state. It must equal what ``submit`` then decides at the same instant, and leave
the store and the live policy exactly as they were."""

from __future__ import annotations

import pytest

from flowcon.alloc.model import Topology
from flowcon.alloc.placement import BuddyPlacer
from flowcon.allocator.planner import PlanError, Planner
from flowcon.allocator.store import Store
from flowcon.allocator.views import JobView
from flowcon.jobspec.spec import parse_jobspec

PROFILE = {1: 10.0, 2: 18.0, 4: 32.0, 8: 50.0}
TABLES = ("jobs", "admissions", "allocations", "events", "measurements")


def _spec(name: str, iterations: int, deadline: float | None, now: float):
    data: dict[str, object] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": "true",
        "global_batch_size": 8,
        "iterations": iterations,
        "profile": PROFILE,
    }
    if deadline is None:
        data["best_effort"] = True
    else:
        data["deadline"] = deadline
    return parse_jobspec(data, now=now)


def _snapshot(planner: Planner):
    st = planner.store
    return (
        {t: st.count(t) for t in TABLES},
        [JobView.of(r).to_json() for r in st.list_jobs()],
    )


# (time, name, iterations, relative deadline or None): admitted, dropped, best-effort and
# queued jobs, arriving while others run (their progress moves between arrivals)
ARRIVALS = [
    (0.0, "a", 2400, 100.0),
    (0.0, "b", 1500, 120.0),
    (5.0, "c", 4000, 110.0),
    (12.5, "d", 300, 60.0),
    (20.0, "e", 800, None),
    (31.0, "f", 100000, 60.0),
    (47.0, "g", 600, 90.0),
    (95.0, "h", 900, 400.0),
]


@pytest.mark.parametrize("policy", ["elasticflow", "edf-admission", "edf", "gandiva", "tiresias"])
@pytest.mark.parametrize("complete_on_progress", [False, True])
def test_dry_run_answers_what_submit_then_decides(tmp_path, policy, complete_on_progress):
    st = Store(tmp_path / "alloc.db")
    planner = Planner(
        st,
        8,
        10.0,
        placer=BuddyPlacer(Topology(2, 4)),
        policy=policy,
        complete_on_progress=complete_on_progress,
    )
    outcomes = set()
    try:
        for now, name, its, dl in ARRIVALS:
            planner.plan(now, force=False)
            spec = _spec(name, its, dl, now)
            before = _snapshot(planner)
            dry = planner.dry_run(spec, now=now)
            assert _snapshot(planner) == before  # nothing written
            assert name not in (getattr(planner.policy, "_ledger", None) or ())
            real = planner.submit(spec, now=now)
            assert (dry.admitted, dry.reason, dry.gpus) == (real.admitted, real.reason, real.gpus)
            assert dry.min_share == real.min_share
            rec = st.get_job(name)
            assert rec is not None
            assert dry.predicted_finish == pytest.approx(rec.predicted_finish)
            outcomes.add((dry.admitted, dry.gpus > 0))
    finally:
        st.close()
    if policy in ("elasticflow", "edf-admission"):
        assert (False, False) in outcomes  # some arrivals are dropped
    assert (True, True) in outcomes


def test_dry_run_refuses_a_live_name_and_a_spec_without_profile(tmp_path):
    st = Store(tmp_path / "alloc.db")
    planner = Planner(st, 8, 10.0)
    try:
        planner.submit(_spec("a", 300, 100, 0.0), now=0.0)
        with pytest.raises(PlanError) as err:
            planner.dry_run(_spec("a", 300, 100, 1.0), now=1.0)
        assert err.value.status == 409
        auto = parse_jobspec(
            {
                "name": "p",
                "image": "flowcon/testbox:latest",
                "command": "true",
                "global_batch_size": 8,
                "iterations": 10,
                "deadline": 100,
                "profile": "auto",
            },
            now=0.0,
        )
        with pytest.raises(PlanError) as err:
            planner.dry_run(auto, now=1.0)
        assert err.value.status == 400
    finally:
        st.close()


def test_dry_run_before_the_first_plan_restores_only_its_copy(tmp_path):
    """A restarted planner rebuilds the policy's reservations on first use; a dry run
    first must not mark the live policy as restored (its copy is restored instead)."""
    st = Store(tmp_path / "alloc.db")
    first = Planner(st, 8, 10.0)
    first.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    again = Planner(st, 8, 10.0)  # the daemon restarted
    try:
        dry = again.dry_run(_spec("b", 2400, 100, 1.0), now=1.0)
        assert not again._restored
        real = again.submit(_spec("b", 2400, 100, 1.0), now=1.0)
        assert (dry.admitted, dry.reason, dry.gpus) == (real.admitted, real.reason, real.gpus)
    finally:
        st.close()
