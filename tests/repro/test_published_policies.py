"""The published simulator's policies: EDF's max_gpu sizing, ElasticFlow's front-loaded
minimum shares (PublishedLedger) and batch declines."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flowcon.alloc.admission_steps import _EPS, _make_plan, _Plan, _Profile, _Run
from flowcon.alloc.filling import _horizon
from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve, floor_power_of_two, powers_of_two
from flowcon.alloc.types import ClusterState
from flowcon.repro.published_policies import (
    EDFPublished,
    ElasticFlowPublished,
    PublishedLedger,
    ef_max_gpu,
    max_gpu,
)

CURVE = ThroughputCurve({1: 1.0, 2: 1.8, 4: 3.0, 8: 2.5})


def _job(name: str, its: float, deadline: float, bs: int = 64) -> Job:
    return Job(name, 0.0, its, deadline, CURVE, model="resnet50", batch_size=bs)


def test_edf_gives_max_gpu_even_where_throughput_falls() -> None:
    a = _job("a", 600, 1000)
    assert max_gpu(a) == 8
    assert max_gpu(_job("b", 1, 1, bs=4)) == 4
    alloc = EDFPublished().schedule(0.0, ClusterState(16, jobs={"a": a}))
    assert alloc == {"a": 8}  # 8 GPUs (2.5 it/s) although 4 are faster (3.0 it/s)


def test_both_hold_the_share_from_now_ours_minimal_in_its_last_slot() -> None:
    """700 iterations, deadline 600 s, 8 free GPUs: 1 GPU is too slow (600 iterations), 2
    GPUs (1.8 it/s) suffice. Both hold 2 GPUs from now and end early (389 s: 7 slots); in
    the last slot ours keeps only 1 GPU (52 iterations left, 60 at 1 GPU)."""
    job = _job("a", 700, 600)
    ours, pub = SlotLedger(8, 60.0), PublishedLedger(8, 60.0)
    for led in (ours, pub):
        assert led.try_admit(job, {"a": job}, 0.0).admitted
    assert pub.share("a", 0.0) == 2
    assert ours.share("a", 0.0) == 2
    p = pub.plan_of("a")
    assert p is not None
    assert p.gpus == (2,) * 7
    o = ours.plan_of("a")
    assert o is not None
    assert o.start == 0.0
    assert o.gpus == (2,) * 6 + (1,)


def test_a_batch_is_declined_together() -> None:
    pol = ElasticFlowPublished()
    state = ClusterState(8)
    fits, hopeless = _job("fits", 60, 600), _job("hopeless", 1e6, 600)
    out = pol.on_submit_batch([fits, hopeless], 0.0, state)
    assert [d.admitted for d in out] == [False, False]
    assert "batch" in (out[0].reason or "")
    assert [d.admitted for d in pol.on_submit_batch([fits], 0.0, state)] == [True]


class _SlotWalkLedger(PublishedLedger):
    """PublishedLedger's fill as first written: every period's seconds and free power of
    two computed where they are used, and the slot where the work is done found by
    walking slot by slot. The ledger now precomputes the periods once per fill and
    bisects for that slot; the plans must be the same, float for float."""

    def _fill(
        self, job: Job, now_k: int, now: float, used: _Profile | None, c: object = None
    ) -> _Plan | None:
        assert used is not None  # never left out: _bounded is False
        assert job.deadline is not None
        if job.remaining <= 0:
            return _Plan(now_k, [], [])
        horizon = _horizon(job.deadline, now_k, now, self.origin, self.slot)
        if horizon is None:
            return None
        end_k, _, _, partial = horizon
        part = dict(partial)
        periods = [(a, b, self.total_gpus - v) for a, b, v in used.segments(now_k, end_k)]
        at = job.curve.at
        need = job.remaining * (1.0 - _EPS)
        prev = 0
        for j in powers_of_two(min(self.total_gpus, ef_max_gpu(job))):
            acc, point = 0.0, None
            for a, b, free in reversed(periods):
                n = j if free >= j else floor_power_of_two(free)
                if n > 0:
                    acc += self._secs(a, b, part) * at(n)
                    if acc >= need:
                        point = a
                        break
            if point is not None:
                runs: list[_Run] = []
                acc = 0.0
                for a, b, free in periods:
                    q = j if a >= point else prev
                    n = min(q, floor_power_of_two(free)) if free > 0 else 0
                    if n <= 0:
                        continue
                    tp = at(n)
                    got = self._secs(a, b, part) * tp
                    if acc + got < need:
                        acc += got
                        runs.append((a, b, n, tp))
                        continue
                    k = a
                    while k < b - 1 and acc + self._secs(a, k + 1, part) * tp < need:
                        k += 1
                    runs.append((a, k + 1, n, tp))
                    break
                return _make_plan(now_k, runs, tuple(sorted(part.items())))
            prev = j
        return None


_CURVES = [
    CURVE,
    ThroughputCurve({1: 2.0, 2: 3.9, 4: 7.5, 8: 14.0, 16: 25.0}),
    ThroughputCurve({1: 0.7, 2: 1.2, 4: 1.3}),
]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(range(len(_CURVES))),
            st.floats(10.0, 40_000.0),  # iterations
            st.floats(120.0, 20_000.0),  # deadline after its submission
            st.floats(0.0, 3_000.0),  # submission
        ),
        min_size=1,
        max_size=8,
    ),
    st.floats(0.0, 59.0),  # how far into its slot the decision falls
)
def test_the_fill_equals_the_slot_walk_it_replaced(
    specs: list[tuple[int, float, float, float]], into: float
) -> None:
    """Jobs admitted one by one at their submission (off slot boundaries, so the first and
    last slots are partial) into both ledgers: the same decisions, the same plans."""
    fast, slow = PublishedLedger(16, 60.0), _SlotWalkLedger(16, 60.0)
    jobs: dict[str, Job] = {}
    for i, (c, its, window, submit) in enumerate(sorted(specs, key=lambda s: s[3])):
        now = (submit // 60) * 60 + into
        job = Job(f"j{i}", now, its, now + window, _CURVES[c], model="resnet50", batch_size=64)
        jobs[job.job_id] = job
        a, b = fast.try_admit(job, jobs, now), slow.try_admit(job, jobs, now)
        assert (a.admitted, a.reason) == (b.admitted, b.reason)
        assert fast._plans == slow._plans
