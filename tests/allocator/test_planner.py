"""The planner over a real SQLite store, without any container (pure decisions).

Decisions are checked against the core called directly on the same jobs, and the closed
loop is checked end to end inside the planner: a measured slowdown of an admitted job must
change a later admission decision.
"""

from __future__ import annotations

import itertools

import pytest

from flowcon.alloc.admission import admit
from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.alloc.placement import BuddyPlacer
from flowcon.allocator.planner import PlanError, Planner
from flowcon.allocator.store import Store
from flowcon.jobspec.spec import parse_jobspec

PROFILE = {1: 10.0, 2: 18.0, 4: 32.0, 8: 50.0}


def _spec(name: str, iterations: int, deadline: float | None, now: float, **kw: object):
    data: dict[str, object] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": "true",
        "global_batch_size": 8,
        "iterations": iterations,
        "profile": kw.pop("profile", PROFILE),
        **kw,
    }
    if deadline is None:
        data["best_effort"] = True
    else:
        data["deadline"] = deadline
    return parse_jobspec(data, now=now)


@pytest.fixture
def planner(tmp_path):
    st = Store(tmp_path / "alloc.db")
    yield Planner(st, 8, 10.0, placer=BuddyPlacer(Topology(2, 4)))
    st.close()


def test_decisions_match_the_core(planner):
    """Each submit is admitted/dropped exactly as core admit() decides on the same jobs."""
    now = 0.0
    jobs: list[Job] = []
    for name, its, dl in [("a", 2400, 100), ("b", 1500, 120), ("c", 4000, 110), ("d", 300, 60)]:
        core = Job(name, now, float(its), now + dl, ThroughputCurve(PROFILE))
        expected = admit(core, jobs, now, 8, 10.0).admitted
        res = planner.submit(_spec(name, its, dl, now), now=now)
        assert res.admitted == expected, name
        if expected:
            jobs.append(core)
    states = {j.name: j.state for j in planner.store.list_jobs()}
    assert "dropped" in states.values()
    assert "running" in states.values()
    adm = planner.store.admissions()
    assert [a["admitted"] for a in adm] == [states[a["job"]] != "dropped" for a in adm]


def test_unsatisfiable_job_is_dropped_with_reason(planner):
    res = planner.submit(_spec("x", 100000, 60, 0.0), now=0.0)
    assert not res.admitted
    assert "unsatisfiable" in res.reason
    rec = planner.store.get_job("x")
    assert rec is not None
    assert rec.state == "dropped"
    assert rec.gpus == 0
    assert [e.kind for e in planner.store.events(job="x")] == ["dropped"]


def test_plan_places_power_of_two_blocks_and_records_history(planner):
    planner.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    planner.submit(_spec("b", 300, 100, 0.0), now=0.0)
    recs = {r.name: r for r in planner.store.active_jobs()}
    assert sum(r.gpus for r in recs.values()) <= 8
    for r in recs.values():
        assert r.gpus in (1, 2, 4, 8)
        assert len(r.placement) == r.gpus
        nodes = {n for n, _ in r.placement}
        assert len(nodes) == (1 if r.gpus <= 4 else 2)
    used = [tuple(p) for r in recs.values() for p in r.placement]
    assert len(used) == len(set(used))
    assert planner.store.allocations("a")[-1]["gpus"] == recs["a"].gpus
    assert any(e.kind == "rescaled" for e in planner.store.events(job="a"))


def test_duplicate_active_name_is_refused(planner):
    planner.submit(_spec("a", 100, 100, 0.0), now=0.0)
    with pytest.raises(PlanError) as err:
        planner.submit(_spec("a", 100, 100, 1.0), now=1.0)
    assert err.value.status == 409


def test_cancel_frees_gpus_and_is_logged(planner):
    planner.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    planner.submit(_spec("b", 500, 100, 0.0), now=0.0)
    planner.cancel("a", now=5.0)
    plan = planner.plan(6.0)
    assert "a" not in plan.allocation
    assert planner.store.get_job("a").state == "cancelled"
    assert planner.store.get_job("b").gpus > 0
    with pytest.raises(PlanError):
        planner.cancel("a", now=7.0)
    with pytest.raises(PlanError) as err:
        planner.cancel("zzz", now=7.0)
    assert err.value.status == 404


def test_progress_estimate_and_completion_on_progress(tmp_path):
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, complete_on_progress=True)
    pl.submit(_spec("a", 500, 100, 0.0), now=0.0)
    gpus = st.get_job("a").gpus  # type: ignore[union-attr]
    pl.plan(5.0)
    rec = st.get_job("a")
    assert rec is not None
    assert rec.done_iterations == pytest.approx(PROFILE[gpus] * 5.0)
    for t in range(10, 200, 10):
        pl.plan(float(t))
    rec = st.get_job("a")
    assert rec is not None
    assert rec.state == "completed"
    assert rec.deadline_met is True
    # finish time is when the last iteration ran (integrated over the allocation history),
    # not the round that noticed it
    hist = st.allocations("a")
    assert hist[-1]["gpus"] == 0
    assert hist[-1]["ts"] == rec.finish_time
    done = sum(
        PROFILE[h["gpus"]] * (nxt["ts"] - h["ts"])
        for h, nxt in itertools.pairwise(hist)
        if h["gpus"]
    )
    assert done == pytest.approx(500.0)


def _ingest_slow(pl: Planner, job: str, factor: float, times: list[float]) -> list[str]:
    rec = pl.store.get_job(job)
    assert rec is not None
    assert rec.gpus > 0
    speed = PROFILE[rec.gpus] * factor
    return [
        pl.ingest(
            "node1",
            {  # type: ignore[typeddict-item, typeddict-unknown-key]
                "container_id": "c1",
                "job": job,
                "iterations_per_s": speed,
                "step": speed * t,  # type: ignore[typeddict-item]
                "ts": t,
            },
            now=t,
        )
        for t in times
    ]


def _closed_loop(tmp_path, measure: bool) -> tuple[bool, Planner]:
    st = Store(tmp_path / f"m{int(measure)}.db")
    pl = Planner(st, 8, 10.0, min_measurements=2)
    assert pl.submit(_spec("a", 2400, 100, 0.0), now=0.0).admitted
    if measure:
        outcomes = _ingest_slow(pl, "a", 0.5, [5.0, 10.0])
        assert outcomes == ["applied", "refined"]
    else:  # same progress as the measured run, from the profile's point of view
        pl.plan(10.0)
    res = pl.submit(_spec("b", 600, 90, 10.0), now=10.0)
    return res.admitted, pl


def test_measured_slowdown_drops_a_marginal_job(tmp_path):
    admitted_by_profile, _ = _closed_loop(tmp_path, measure=False)
    admitted_measured, pl = _closed_loop(tmp_path, measure=True)
    assert admitted_by_profile is True
    assert admitted_measured is False
    # the decision was taken with the measured curve, and says so
    adm = pl.store.admissions("b")[-1]
    assert adm["measured"] is True
    assert [e.data["measured_jobs"] for e in pl.store.events(job="b", kind="dropped")] == [["a"]]
    refined = pl.store.events(job="a", kind="curve_refined")
    assert len(refined) == 1
    assert refined[0].data["after"] == pytest.approx(refined[0].data["before"] * 0.5)
    # the whole curve followed the measurement (shape kept, level corrected)
    rec = pl.store.get_job("a")
    assert rec is not None
    assert pl.curve(rec).at(1) == pytest.approx(PROFILE[1] * 0.5)


def test_one_measurement_is_not_trusted_and_bad_values_are_skipped(tmp_path):
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, min_measurements=2)
    pl.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    rec = st.get_job("a")
    assert rec is not None
    before = pl.curve(rec).at(rec.gpus)
    assert _ingest_slow(pl, "a", 0.5, [5.0]) == ["applied"]
    rec = st.get_job("a")
    assert rec is not None
    assert pl.curve(rec).at(rec.gpus) == before
    bad = [
        {"job": "a", "iterations_per_s": 3.0},  # no container id
        {"container_id": "c", "job": "a", "iterations_per_s": float("nan"), "step": "x"},
        {"container_id": "c", "job": "a", "iterations_per_s": -4},
        {"container_id": "c", "job": "ghost", "iterations_per_s": 4},
    ]
    out = [pl.ingest("n", m, now=6.0) for m in bad]  # type: ignore[arg-type]
    assert out[0].startswith("skipped")
    assert out[1:] == ["stored", "stored", "stored"]
    rec = st.get_job("a")
    assert rec is not None
    assert rec.measured_n == {rec.gpus: 1}


def test_measurement_from_an_old_container_is_ignored(tmp_path):
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, min_measurements=1)
    pl.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    pl.intake.set_containers("a", {"newcontainer123": 1})
    m = {"container_id": "oldcontainer", "job": "a", "iterations_per_s": 1.0, "ts": 1.0}
    assert pl.ingest("n", m, now=1.0) == "stored"  # type: ignore[arg-type]
    m["container_id"] = "newcontainer"  # short id prefix of the current container
    assert pl.ingest("n", m, now=2.0) == "refined"  # type: ignore[arg-type]


def test_state_survives_a_planner_restart(tmp_path):
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, min_measurements=1)
    pl.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    _ingest_slow(pl, "a", 0.5, [5.0])
    st.close()
    st2 = Store(tmp_path / "a.db")
    pl2 = Planner(st2, 8, 10.0, min_measurements=1)
    rec = st2.get_job("a")
    assert rec is not None
    assert pl2.curve(rec).at(rec.gpus) == pytest.approx(PROFILE[rec.gpus] * 0.5)
    assert pl2.submit(_spec("b", 600, 90, 10.0), now=10.0).admitted is False


def test_slot_tick_keeps_the_allocation_while_it_still_guarantees(tmp_path):
    """Periodic re-plans (force=False) do not rescale for marginal gains, but do when a
    job falls below its minimum satisfactory share."""
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, placer=BuddyPlacer(Topology(2, 4)))
    pl.submit(_spec("a", 2400, 100, 0.0), now=0.0)
    pl.submit(_spec("b", 300, 100, 0.0), now=0.0)
    before = {r.name: (r.gpus, r.placement) for r in st.active_jobs()}
    n_alloc = len(st.allocations())
    for t in (10.0, 20.0, 30.0):
        plan = pl.plan(t, force=False)
        assert plan.changes == []
    assert {r.name: (r.gpus, r.placement) for r in st.active_jobs()} == before
    assert len(st.allocations()) == n_alloc
    # "a" reports it is far behind: 2390 iterations left need 47.8 s on 8 GPUs and 50 s
    # remain, so its minimum share in the current slot is 8 GPUs, more than it holds
    a = st.get_job("a")
    assert a is not None
    pl.ingest("n", {"container_id": "c", "job": "a", "step": 10.0, "ts": 50.0}, now=50.0)  # type: ignore[typeddict-item]
    plan = pl.plan(50.0, force=False)
    assert [c.job for c in plan.changes if c.job == "a"] == ["a"]
    assert st.get_job("a").gpus > a.gpus  # type: ignore[union-attr]


def test_measured_restart_overhead_is_charged_in_admission(tmp_path):
    """A job that fits exactly by the profile no longer fits once every checkpoint-restart
    is known to cost time; without a measured overhead the planner equals core admit()."""
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0)
    # 1 GPU at 10 it/s for exactly 100 s: 1000 iterations fit with zero overhead
    assert pl.submit(_spec("exact", 1000, 100, 0.0, max_gpus=1), now=0.0).admitted
    st2 = Store(tmp_path / "b.db")
    pl2 = Planner(st2, 8, 10.0)
    pl2.observe_overhead(5.0)
    res = pl2.submit(_spec("exact", 1000, 100, 0.0, max_gpus=1), now=0.0)
    assert not res.admitted
    assert st2.events(job="exact")[0].data["restart_overhead"] == 5.0


def test_profiling_record_blocks_the_name_and_can_be_cancelled_or_fail(tmp_path):
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0)
    auto = _spec("a", 600, 100, 0.0, profile="auto")
    assert auto.profile is None
    assert auto.profile_auto
    pl.begin_profiling(auto, [1, 2, 4], now=0.0)
    assert st.get_job("a").state == "profiling"  # type: ignore[union-attr]
    with pytest.raises(PlanError) as err:  # same name while profiling
        pl.begin_profiling(_spec("a", 600, 100, 1.0, profile="auto"), [1], now=1.0)
    assert err.value.status == 409
    with pytest.raises(PlanError):  # a different submission cannot take its place
        pl.submit(_spec("a", 600, 100, 1.0), now=1.0)
    assert pl.plan(2.0).allocation == {}  # a profiling job holds no GPUs
    # the pre-run's result is admitted as the same submission
    from flowcon.jobspec.spec import ThroughputProfile

    res = pl.submit(auto.with_profile(ThroughputProfile(((1, 10.0), (2, 18.0)))), now=3.0)
    assert res.admitted
    assert st.get_job("a").profile == {1: 10.0, 2: 18.0}  # type: ignore[union-attr]
    # cancel during profiling; a failed pre-run drops the job with the reason
    pl.begin_profiling(_spec("b", 600, 100, 4.0, profile="auto"), [1], now=4.0)
    assert pl.cancel("b", now=5.0).state == "cancelled"
    assert pl.profiling_failed("b", "late", now=6.0) is False  # already decided
    pl.begin_profiling(_spec("c", 600, 100, 7.0, profile="auto"), [1], now=7.0)
    assert pl.profiling_failed("c", "no metric lines", now=8.0) is True
    c = st.get_job("c")
    assert c is not None
    assert c.state == "dropped"
    assert "no metric lines" in c.reason
    assert st.admissions("c")[-1]["admitted"] is False
    assert [e.kind for e in st.events(job="c")] == [
        "profiling_started",
        "profiling_failed",
        "dropped",
    ]


def test_agent_rows_count_at_their_containers_gpu_count_once(tmp_path):
    """The agent's field name, a rate taken before a rescale, and repeated rates."""
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, min_measurements=1)
    pl.submit(_spec("a", 2400, 100, 0.0, max_gpus=4), now=0.0)
    rec = st.get_job("a")
    assert rec is not None
    assert rec.gpus == 4
    pl.intake.set_containers("a", {"old4": 4, "new2": 2})
    row = {"container_id": "old4", "job": "a", "iterations_per_second": 16.0, "ts": 1.0}
    assert pl.ingest("n", row, now=1.0) == "refined"  # type: ignore[arg-type]
    assert pl.ingest("n", dict(row), now=2.0) == "stored"  # type: ignore[arg-type]  # same ts: a repeated rate
    row2 = {"container_id": "new2", "job": "a", "iterations_per_second": 9.0, "ts": 3.0}
    assert pl.ingest("n", row2, now=3.0) == "refined"  # type: ignore[arg-type]
    rec = st.get_job("a")
    assert rec is not None
    assert rec.measured == {4: 16.0, 2: 9.0}
    assert rec.measured_n == {4: 1, 2: 1}
    assert [m["gpus"] for m in st.measurements("a")] == [4, 4, 2]


def test_planner_runs_the_configured_policy(tmp_path):
    """Any ``flowcon simulate --policy`` works live: EDF has no admission control."""
    st = Store(tmp_path / "a.db")
    pl = Planner(st, 8, 10.0, policy="edf")
    assert pl.policy.name == "edf"
    assert pl.submit(_spec("a", 2400, 100, 0.0), now=0.0).admitted
    # hopeless deadline: ElasticFlow drops it, EDF takes it
    assert pl.submit(_spec("b", 10**7, 20, 0.0), now=0.0).admitted
    ef = Planner(Store(tmp_path / "b.db"), 8, 10.0)
    assert ef.policy.name == "elasticflow"
    assert not ef.submit(_spec("b", 10**7, 20, 0.0), now=0.0).admitted


def test_soft_deadline_reaches_the_policy(tmp_path):
    """A deadline no GPU count can meet: dropped when hard; admitted when the spec says
    ``deadline_kind: soft`` (no reservation, spare GPUs only, section 4.4), and the policy
    sees it as soft."""
    from dataclasses import replace

    from flowcon.jobspec.spec import JobSpec

    def soft(spec: JobSpec) -> JobSpec:
        return replace(spec, soft_deadline=True)  # what deadline_kind: soft parses to

    st = Store(tmp_path / "alloc.db")
    try:
        p = Planner(st, 8, 10.0, placer=BuddyPlacer(Topology(2, 4)))
        assert not p.submit(_spec("hard", 100000, 60, 0.0), now=0.0).admitted
        res = p.submit(soft(_spec("soft", 100000, 60, 0.0)), now=0.0)
        assert res.admitted
        rec = st.get_job("soft")
        assert rec is not None
        assert rec.soft_deadline
        job = p.core_job(rec)
        assert job.soft_deadline
        assert not job.needs_guarantee
    finally:
        st.close()


def test_a_guarantee_that_cannot_be_kept_is_given_up_for_a_newcomer(tmp_path):
    """A reports no progress by t=60: 2,400 iterations in the 40 s left need more than the
    cluster's 8 GPUs (2,000 at most), so no plan meets its deadline any more. B (1,800
    iterations in those 40 s) needs the room A's reservation holds (4 GPUs until t=80:
    beside it B gets 1,640 at most); it is admitted, and A's lost guarantee is recorded as
    an event while A keeps running, "at risk"."""
    st = Store(tmp_path / "g.db")
    pl = Planner(st, 8, 10.0)
    assert pl.submit(_spec("a", 2400, 100, 0.0), now=0.0).admitted
    assert pl.observe_progress("a", 0.0, 60.0)
    res = pl.submit(_spec("b", 1800, 40, 60.0), now=60.0)
    assert res.admitted, res.reason
    (ev,) = st.events(job="a", kind="guarantee_lost")
    assert ev.data["newcomer"] == "b"
    assert "no plan meets its deadline" in ev.data["reason"]
    rec = st.get_job("a")
    assert rec is not None
    assert rec.active
    assert rec.reason.startswith("at risk")
    assert st.events(job="b", kind="guarantee_lost") == []
    st.close()


def test_the_submit_lines_name_the_guarantees_given_up() -> None:
    from flowcon.allocator.views import SubmitAnswer as Answer
    from flowcon.client.render import dry_run_line, submit_line

    out = {"name": "b", "admitted": True, "gpus": 4, "reason": "ok", "revoked": ["a"]}
    line = submit_line(Answer.from_json(out), None)
    assert line == "admitted b: 4 GPUs now (ok); deadline guarantee given up: a"
    assert (
        submit_line(Answer.from_json({**out, "revoked": []}), None) == "admitted b: 4 GPUs now (ok)"
    )
    dry = {**out, "now": 0.0, "predicted_finish": None, "deadline": None}
    assert "(ok; deadline guarantee given up: a; nothing created)" in dry_run_line(
        Answer.from_json(dry)
    )


def test_the_live_job_carries_its_model_batch_and_deadline_kind(planner):
    """The job the policy sees live names its model (the spec's image: the key of the
    per-model throughput tables and caps, the simulator's ``model_name``), its batch size
    and its deadline kind, as the stored spec gives them."""
    spec = _spec("m", 600, 120, 0.0, global_batch_size=16, deadline_kind="soft", max_gpus=4)
    assert planner.submit(spec, now=0.0).admitted
    rec = planner.store.get_job("m")
    assert rec is not None
    job = planner.core_job(rec)
    assert job.model == "flowcon/testbox:latest"
    assert (job.batch_size, job.min_gpus, job.max_gpus) == (16, 1, 4)
    assert job.soft_deadline
    assert job.deadline == 120.0
    assert job.iterations == 600.0


def test_placement_lists_read_the_placers_plan() -> None:
    from flowcon.alloc.placement import PlacementPlan
    from flowcon.allocator.planner import placement_lists

    plan = PlacementPlan({"a": ((0, 1), (0, 2)), "b": ()})
    assert placement_lists(plan) == {"a": [[0, 1], [0, 2]], "b": []}


def test_a_submit_counts_served_gpu_seconds_once(planner):
    """A submit moves the running jobs to its time for its decision without storing them;
    the plan after it stores them: progress and GPU-seconds served are counted once."""
    planner.submit(_spec("a", 100_000, None, 0.0), now=0.0)
    gpus = planner.store.get_job("a").gpus
    assert gpus > 0
    planner.submit(_spec("b", 100_000, None, 10.0), now=10.0)  # plans at 10 as well
    rec = planner.store.get_job("a")
    assert rec.progress_ts == 10.0
    assert rec.done_iterations == pytest.approx(PROFILE[gpus] * 10.0)
    assert planner._attained["a"] == pytest.approx(gpus * 10.0)
