"""Saxena's DP optimizer: a hand-checked instance, brute force on random small ones, and
the autoscaler's drop / queue modes in the simulator."""

from __future__ import annotations

import itertools
import random

import pytest

from flowcon.alloc.batch import make_range
from flowcon.alloc.model import Job, ThroughputCurve, Topology
from flowcon.baselines.saxena import Option, SaxenaPolicy, job_options, solve
from flowcon.policy_registry import POLICIES, make_policy
from flowcon.sim.engine import Simulator


def _ranged(jid: str, rows: dict[int, dict[int, float]], submitted: int, **kw: int) -> Job:
    curves = {b: ThroughputCurve(p) for b, p in rows.items()}
    brange = make_range(curves, min(rows), max(rows), submitted, kw.get("max_per_gpu"))
    return Job(jid, 0.0, 1000.0, None, brange.equivalent(submitted), batch_size=submitted,
               batch_range=brange)  # fmt: skip


# Job A, batches 4 and 8 (iterations/s):   b=4: 25, 40, 50 on 1, 2, 4 GPUs -> 100, 160, 200
#   samples/s; b=8: 10, 17.5, 30 -> 80, 140, 240. Base T(b_max, 1) = best 1-GPU rate = 100.
#   Scaling factors: k=1 1.0 (b=4), k=2 1.6 (b=4), k=4 2.4 (b=8).
# Job B, fixed batch (no range): 5, 9, 12 it/s -> factors 1.0, 1.8, 2.4.
# Job C, batches 4 and 8, at most 4 samples per GPU: b=4: 20, 30 it/s on 1, 2 GPUs ->
#   80, 120 samples/s; b=8 on 1 GPU is infeasible (8 per GPU), 22, 35 it/s on 2, 4 -> 176,
#   280. Base = 80 (b=4 on 1 GPU). Factors: k=1 1.0 (b=4), k=2 2.2 (b=8), k=4 3.5 (b=8).
# On 4 GPUs each job needs >= 1: (A, B, C) = (1,1,1) 3.0; (2,1,1) 3.6; (1,2,1) 3.8;
#   (1,1,2) 4.2 <- best; nothing else fits. On 3 GPUs only (1,1,1) = 3.0; on 2: infeasible.
def _three() -> list[Job]:
    a = _ranged("a", {4: {1: 25, 2: 40, 4: 50}, 8: {1: 10, 2: 17.5, 4: 30}}, 4)
    b = Job("b", 0.0, 1000.0, None, ThroughputCurve({1: 5, 2: 9, 4: 12}), batch_size=32)
    c = _ranged("c", {4: {1: 20, 2: 30}, 8: {1: 9, 2: 22, 4: 35}}, 4, max_per_gpu=4)
    return [a, b, c]


def _opts(jobs: list[Job], total: int, batch: str = "elastic") -> list[list[Option]]:
    pol = SaxenaPolicy(batch)
    return [job_options(j, pol.batches(j), total, 8) for j in jobs]


def test_options_by_hand() -> None:
    a, b, c = _opts(_three(), 4)
    assert [(o.gpus, o.batch, round(o.value, 6)) for o in a] == [
        (1, 4, 1.0),
        (2, 4, 1.6),
        (4, 8, 2.4),
    ]
    assert [(o.gpus, round(o.value, 6)) for o in b] == [(1, 1.0), (2, 1.8), (4, 2.4)]
    assert [(o.gpus, o.batch, round(o.value, 6)) for o in c] == [
        (1, 4, 1.0),
        (2, 8, 2.2),
        (4, 8, 3.5),
    ]


def test_dp_by_hand() -> None:
    best = solve(_opts(_three(), 4), 4)
    assert best is not None
    value, chosen = best
    assert value == pytest.approx(4.2)
    assert [(o.gpus, o.batch) for o in chosen] == [(1, 4), (1, 32), (2, 8)]
    three = solve(_opts(_three(), 3), 3)
    assert three is not None
    assert three[0] == pytest.approx(3.0)
    assert solve(_opts(_three(), 2), 2) is None


def test_fixed_batch_baselines_by_hand() -> None:
    # Max-BS: C at b=8 cannot run on 1 GPU; A at b=8: 0.8, 1.4, 2.4; on 4 GPUs
    # (A, B, C) must be (1, 1, 2): 0.8 + 1.0 + 2.2 = 4.0
    best = solve(_opts(_three(), 4, "max"), 4)
    assert best is not None
    assert best[0] == pytest.approx(4.0)
    assert [o.gpus for o in best[1]] == [1, 1, 2]
    assert solve(_opts(_three(), 3, "max"), 3) is None  # C needs 2: 1 + 1 + 2 > 3
    # Min-BS: A and C at 4: (1,1,1) 3.0, (2,1,1) 3.6, (1,2,1) 3.8, (1,1,2) 1 + 1 + 1.5
    best = solve(_opts(_three(), 4, "min"), 4)
    assert best is not None
    assert best[0] == pytest.approx(3.8)


def _brute(options: list[list[Option]], total: int) -> float | None:
    best: float | None = None
    for pick in itertools.product(*options):
        if sum(o.gpus for o in pick) <= total:
            v = sum(o.value for o in pick)
            best = v if best is None or v > best else best
    return best


@pytest.mark.parametrize("seed", range(40))
def test_dp_matches_brute_force(seed: int) -> None:
    rng = random.Random(seed)
    jobs = rng.randint(1, 4)
    options = []
    for _ in range(jobs):
        counts = sorted(rng.sample([1, 2, 3, 4, 8], rng.randint(0, 3)))
        options.append([Option(k, 1, rng.uniform(0.1, k)) for k in counts])
    total = rng.randint(1, 10)
    got = solve(options, total)
    want = _brute(options, total)
    if want is None:
        assert got is None
    else:
        assert got is not None
        assert got[0] == pytest.approx(want)
        assert sum(o.gpus for o in got[1]) <= total
        assert got[0] == pytest.approx(sum(o.value for o in got[1]))


def _sim(policy: str, jobs: list[Job], gpus: int) -> dict[str, tuple[bool, float | None]]:
    res = Simulator(jobs, Topology(1, gpus), make_policy(policy), slot=60.0).run()
    return {r.job.job_id: (r.admitted, r.finish) for r in res.results}


def test_drop_mode_drops_what_does_not_fit() -> None:
    # 3 jobs at t=0 on 2 GPUs: a and b fit on one GPU each, c is dropped
    out = _sim("saxena-dp", _three(), 2)
    assert out["a"][0]
    assert out["b"][0]
    assert not out["c"][0]
    # a: 1000 iterations of b=4 at 25 it/s on 1 GPU = 40 s; b at 5 it/s does 300 by the
    # next decision (60 s), which gives it both GPUs: 700 / 9 it/s = 77.8 s more
    assert out["a"][1] == pytest.approx(40.0)
    assert out["b"][1] == pytest.approx(60.0 + 700 / 9)


def test_queue_mode_runs_it_later() -> None:
    out = _sim("saxena-dp-queue", _three(), 2)
    assert all(adm for adm, _ in out.values())
    # a finishes at 40 s; c starts at the next slot boundary (60 s) on the freed GPU at
    # b=4 (8 per GPU does not fit one GPU): 1000 it / 20 it/s = 50 s -> 110 s
    assert out["c"][1] == pytest.approx(110.0)


def test_elastic_batch_changes_the_work_rate() -> None:
    # a alone on 4 GPUs runs at b=8 (240 samples/s): its 1000 iterations of b=4 are
    # 4000 samples -> 16.67 s; at its submitted b=4 it would take 20 s
    out = _sim("saxena-dp", _three()[:1], 4)
    assert out["a"][1] == pytest.approx(4000 / 240)
    out = _sim("min-bs", _three()[:1], 4)
    assert out["a"][1] == pytest.approx(20.0)


def test_random_bs_is_seeded() -> None:
    jobs = _three()
    a = [SaxenaPolicy("random", seed=3).batches(j) for j in jobs]
    assert a == [SaxenaPolicy("random", seed=3).batches(j) for j in jobs]
    assert all(len(x) == 1 for x in a)


def test_registered_and_bad_arguments() -> None:
    for name in ("saxena-dp", "saxena-dp-queue", "max-bs", "min-bs", "random-bs"):
        assert name in POLICIES
        assert make_policy(name).name == name
    with pytest.raises(ValueError, match="batch"):
        SaxenaPolicy("huge")
    with pytest.raises(ValueError, match="mode"):
        SaxenaPolicy(mode="later")
