"""The published simulator's policies: EDF's max_gpu sizing, ElasticFlow's front-loaded
minimum shares (PublishedLedger) and batch declines."""

from __future__ import annotations

from flowcon.alloc.admission import SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.alloc.policy import ClusterState
from flowcon.alloc.published import EDFPublished, ElasticFlowPublished, PublishedLedger, max_gpu

CURVE = ThroughputCurve({1: 1.0, 2: 1.8, 4: 3.0, 8: 2.5})


def _job(name: str, its: float, deadline: float, bs: int = 64) -> Job:
    return Job(name, 0.0, its, deadline, CURVE, model="resnet50", batch_size=bs)


def test_edf_gives_max_gpu_even_where_throughput_falls() -> None:
    a = _job("a", 600, 1000)
    assert max_gpu(a) == 8 and max_gpu(_job("b", 1, 1, bs=4)) == 4
    alloc = EDFPublished().schedule(0.0, ClusterState(16, jobs={"a": a}))
    assert alloc == {"a": 8}  # 8 GPUs (2.5 it/s) although 4 are faster (3.0 it/s)


def test_published_shares_are_front_loaded_ours_back_loaded() -> None:
    """700 iterations, deadline 600 s, 8 free GPUs: 1 GPU is too slow (600 iterations), 2
    GPUs (1.8 it/s) suffice. Ours reserves 2 GPUs in the last slots before the deadline;
    the published fill holds them from now and ends early (389 s: 7 slots)."""
    job = _job("a", 700, 600)
    ours, pub = SlotLedger(8, 60.0), PublishedLedger(8, 60.0)
    for led in (ours, pub):
        assert led.try_admit(job, {"a": job}, 0.0).admitted
    assert pub.share("a", 0.0) == 2 and ours.share("a", 0.0) == 0
    p = pub.plan_of("a")
    assert p is not None and p.gpus == (2,) * 7
    o = ours.plan_of("a")
    assert o is not None and o.start == 180.0 and o.gpus == (1,) + (2,) * 6


def test_a_batch_is_declined_together() -> None:
    pol = ElasticFlowPublished()
    state = ClusterState(8)
    fits, hopeless = _job("fits", 60, 600), _job("hopeless", 1e6, 600)
    out = pol.on_submit_batch([fits, hopeless], 0.0, state)
    assert [d.admitted for d in out] == [False, False]
    assert "batch" in (out[0].reason or "")
    assert [d.admitted for d in pol.on_submit_batch([fits], 0.0, state)] == [True]
