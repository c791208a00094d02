"""ElasticFlow core: curves, the paper's worked examples, Theorem 1, allocation."""

from __future__ import annotations

import math
import random

import pytest

from flowcon.alloc.admission import admit
from flowcon.alloc.allocation import allocate
from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.alloc.types import ClusterState
from flowcon.policy_registry import make_policy
from flowcon.sim.engine import Simulator

FIG4 = ThroughputCurve({1: 1.0, 2: 1.5, 4: 2.0})  # Figure 4(a)
LINEAR4 = ThroughputCurve({1: 1.0, 2: 2.0, 4: 4.0})


def job(jid: str, iters: float, deadline: float | None, curve: ThroughputCurve, **kw) -> Job:
    return Job(job_id=jid, submit_time=0.0, iterations=iters, deadline=deadline, curve=curve, **kw)


def test_curve_is_conservative_and_refinable() -> None:
    c = ThroughputCurve({1: 2.0, 2: 3.0, 8: 5.0, 16: float("nan"), 32: 0.0})
    assert c.at(0) == 0.0
    assert c.at(4) == 3.0  # not measured: value of the largest measured count below
    assert c.at(64) == 5.0  # never extrapolated upwards
    assert c.max_useful_gpus == 8
    r = c.with_measurement(2, 1.5)  # job runs at half the profiled speed
    assert r.at(2) == 1.5
    assert r.at(1) == pytest.approx(1.0)
    assert r.at(8) == pytest.approx(2.5)
    assert r.with_measurement(8, 4.0).at(2) == 1.5  # earlier measurements are kept
    with pytest.raises(ValueError, match="invalid measurement"):
        c.with_measurement(2, float("nan"))


def test_topology_spec() -> None:
    t = Topology.from_spec("16x8")
    assert (t.nodes, t.gpus_per_node, t.total_gpus) == (16, 8, 128)
    assert Topology.from_spec("2x4x8").total_gpus == 64
    with pytest.raises(ValueError, match="is not NODESxGPUS"):
        Topology.from_spec("16by8")


def test_figure4_admission_needs_t1_plus_t4() -> None:
    a = job("A", 1.0, 1.0, LINEAR4)  # 1 GPU for the first slot
    b = job("B", 2.0, 1.0, LINEAR4)  # 2 GPUs for the first slot
    c = job("C", 3.0, 2.0, FIG4)
    alone = admit(c, [], 0.0, 4, 1.0)
    assert alone.admitted
    assert alone.plans["C"].gpus == (2, 2)  # Figure 4(b)
    d = admit(c, [a, b], 0.0, 4, 1.0)
    assert d.admitted
    assert d.plans["C"].gpus == (1, 4)  # Figure 4(c): T(1) + T(4) = 3 = M_c
    assert d.min_share == {"A": 1, "B": 2, "C": 1}
    worse = admit(job("C", 3.01, 2.0, FIG4), [a, b], 0.0, 4, 1.0)
    assert not worse.admitted
    assert worse.reason
    # a newcomer that would break an admitted job is dropped, naming the victim
    hog = admit(job("H", 4.0, 1.0, LINEAR4), [a, b], 0.0, 4, 1.0)
    assert not hog.admitted
    assert "admitted job" in (hog.reason or "")


def test_unsatisfiable_alone_reason() -> None:
    d = admit(job("X", 100.0, 2.0, FIG4), [], 0.0, 4, 1.0)
    assert not d.admitted
    assert "even alone" in (d.reason or "")


def _theorem1_condition(jobs: list[tuple[float, float, float]], g: int) -> bool:
    total = 0.0
    for m, k, d in sorted(jobs, key=lambda x: x[2]):
        total += m / k
        if total > g * d + 1e-9:
            return False
    return True


@pytest.mark.parametrize("seed", range(40))
def test_theorem1_linear_scaling(seed: int) -> None:
    """With linear curves (and any GPU count allowed) the job set is admissible exactly when
    condition (1) holds."""
    rng = random.Random(seed)
    g = rng.choice([2, 4, 8])
    specs = []
    for _ in range(rng.randint(2, 6)):
        k = rng.choice([1.0, 2.0, 0.5])
        d = float(rng.randint(1, 8))
        specs.append((k * rng.randint(1, int(g * d)), k, d))
    specs.sort(key=lambda x: x[2])
    admitted: list[Job] = []
    all_in = True
    for i, (m, k, d) in enumerate(specs):
        curve = ThroughputCurve({n: k * n for n in range(1, g + 1)})
        jb = job(f"j{i}", m, d, curve)
        dec = admit(jb, admitted, 0.0, g, 1.0, power_of_two=False)
        if not dec.admitted:
            all_in = False
            break
        admitted.append(jb)
    assert all_in == _theorem1_condition(specs, g)


def test_figure3_edf_misses_while_one_gpu_each_meets_both() -> None:
    """Two GPUs, concave curve: EDF gives A both GPUs and B misses; one GPU each meets both."""
    curve = ThroughputCurve({1: 1.0, 2: 1.5})

    def run(policy: str) -> dict[str, float]:
        jobs = [
            Job(job_id="A", submit_time=0, iterations=120, deadline=120, curve=curve),
            Job(job_id="B", submit_time=0, iterations=120, deadline=150, curve=curve),
        ]
        res = Simulator(jobs, Topology(1, 2), make_policy(policy), slot=1.0).run()
        return {r.job.job_id: r.finish or math.inf for r in res.results}

    edf = run("edf")
    assert edf["A"] == pytest.approx(80)
    assert edf["B"] > 150
    ef = run("elasticflow")
    assert ef["A"] <= 120
    assert ef["B"] <= 150


def test_allocation_min_share_then_marginal_return() -> None:
    steep = ThroughputCurve({1: 1.0, 2: 1.9, 4: 3.6, 8: 6.0})
    flat = ThroughputCurve({1: 1.0, 2: 1.1, 4: 1.15, 8: 1.2})
    urgent = job("urgent", 3.6 * 60 * 10, 600.0, steep)  # needs 4 GPUs for all 10 slots
    lazy = job("lazy", 1e6, None, flat)
    eager = job("eager", 1e6, None, steep)
    out = allocate([urgent, lazy, eager], 0.0, 8, 60.0)
    assert out["urgent"] >= 4
    assert sum(out.values()) <= 8
    assert all(n & (n - 1) == 0 for n in out.values() if n)
    # every job first gets one GPU (marginal return 1); the next spare GPU goes to the
    # steep job (return 0.9) before the flat one (0.1), which gets the last GPU only because
    # nothing else fits in it (urgent's next step would need 4)
    assert out == {"urgent": 4, "eager": 2, "lazy": 2}
    out = allocate([lazy, eager], 0.0, 4, 60.0)
    assert out == {"eager": 2, "lazy": 2}
    assert allocate([lazy, eager], 0.0, 3, 60.0) == {"eager": 2, "lazy": 1}


def test_best_effort_and_soft_deadline_get_spare_only() -> None:
    ledger = SlotLedger(4, 60.0)
    be = job("be", 100.0, None, FIG4)
    soft = job("soft", 1e9, 60.0, FIG4, soft_deadline=True)
    assert ledger.try_admit(be, {"be": be}, 0.0).admitted
    assert ledger.try_admit(soft, {"soft": soft}, 0.0).admitted  # never guaranteed
    assert len(ledger) == 0
    pol = make_policy("elasticflow")
    state = ClusterState(total_gpus=4, slot=60.0)
    hard = job("hard", 2.0 * 60 * 5, 300.0, FIG4)  # needs 4 GPUs (T=2) for 5 slots
    for j in (be, soft, hard):
        assert pol.on_submit(j, 0.0, state).admitted
        state.jobs[j.job_id] = j
    out = pol.schedule(0.0, state)
    assert out["hard"] == 4
    assert out["be"] == 0
    assert out["soft"] == 0


@pytest.mark.parametrize("seed", range(6))
def test_ledger_profile_matches_its_plans(seed: int) -> None:
    """The reserved-GPU step function stays the sum of the plans through admissions,
    completions, refreshes and re-plans, also when the clock goes backwards."""
    rng = random.Random(seed)
    curve = ThroughputCurve({1: 1.0, 2: 1.8, 4: 3.2, 8: 5.0})
    ledger = SlotLedger(16, 60.0, overhead=5.0)
    jobs: dict[str, Job] = {}
    times = [60.0 * k for k in range(0, 40, 2)] + [600.0, 0.0, 1800.0]
    for step, now in enumerate(times):
        for _ in range(3):
            jid = f"j{step}-{rng.randint(0, 10**6)}"
            j = job(jid, rng.uniform(500, 20000), now + rng.uniform(300, 6000), curve)
            if ledger.try_admit(j, {**jobs, jid: j}, now).admitted:
                jobs[jid] = j
        for jid in list(jobs):
            jobs[jid].done_iterations = min(jobs[jid].iterations, jobs[jid].done_iterations + 200)
            if rng.random() < 0.15:
                ledger.remove(jid)
                del jobs[jid]
        if step % 5 == 4:
            ledger.refresh(ledger.behind(jobs, now), jobs, now)
        if step % 7 == 6:
            for jid in ledger.replan(jobs, now):
                del jobs[jid]
        horizon = 120
        expect = [0] * horizon
        for p in ledger.plans().values():
            for i in range(horizon):
                expect[i] += p.at(now + i * 60.0)
        assert ledger.used_profile(now, horizon) == expect
        assert all(v <= 16 for v in expect)
        assert ledger.shares(now) == {jid: p.at(now) for jid, p in ledger.plans().items()}
