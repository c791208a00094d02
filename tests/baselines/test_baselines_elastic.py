"""Elastic Tiresias (EDL 5.1) and E-FIFO / E-BF (Elan VI.C) on small traces checked by
hand."""

from __future__ import annotations

import pytest
from support.small_trace import finishes as _finishes
from support.small_trace import job as _job

from flowcon.alloc.model import Job
from flowcon.alloc.types import ClusterState
from flowcon.baselines.elastic import ElanPolicy, ElasticTiresiasPolicy


def test_elastic_tiresias_expands_into_idle_gpus() -> None:
    # 0: a alone asks 1 GPU; nobody waits, so it grows 1 -> 2 (gain 0.5 / GPU), 2 -> 4
    # (0.5/1.5/2 = 0.17 / GPU): [0, 600] at 2.0 = 1200 its, 2400 GPU-s (queue 0).
    # 600: b (2 GPUs) arrives: a 1, b 2, 1 idle -> a 1 -> 2 (0.5 / GPU; b's 2 -> 4 needs 2).
    # b: 900 / 1.5 = 600 s -> ends 1200; a reaches 3600 GPU-s at 1200 too (queue 1).
    # 1200: a alone grows to 4 again with 3600 - 1200 - 600 x 1.5 = 1500 its left at 2.0:
    # 750 s -> 1950.
    out = _finishes([_job("a", 0, 3600, req=1), _job("b", 600, 900, req=2)],
                    ElasticTiresiasPolicy())  # fmt: skip
    assert out == {"a": pytest.approx(1950), "b": pytest.approx(1200)}


def _compaction_state() -> ClusterState:
    # 8 GPUs. x (queue 1 with the 1,000 GPU-s limit) runs on 4; u and v arrive (queue 0):
    # Tiresias gives u its 4, v (8) does not fit, x fits in the 4 left (backfill).
    st = ClusterState(total_gpus=8)
    for j in (_job("x", 0, 1e6, req=4), _job("u", 600, 1e6, req=4), _job("v", 600, 1e6, req=8)):
        st.jobs[j.job_id] = j
    st.attained = {"x": 2000.0}
    st.allocation = {"x": 4}
    return st


def test_elastic_tiresias_compaction_scales_in_lower_queues() -> None:
    st = _compaction_state()
    plain = ElasticTiresiasPolicy((1000.0,))  # N = 10: one waiting job, no compaction
    assert plain.schedule(600.0, st) == {"u": 4, "v": 0, "x": 4}
    # N = 0, r = 0.25: v may start on 2 (>= 0.25 x 8); x (queue 1) may go down to 1.
    # Free 0 + freeable 3 -> v gets 2: x halved 4 -> 2. u is in queue 0: never scaled in.
    pol = ElasticTiresiasPolicy((1000.0,), waiting_threshold=0, min_fraction=0.25)
    assert pol.schedule(600.0, st) == {"u": 4, "v": 2, "x": 2}
    # r = 0.5: v needs 4, x may only give 2 -> v waits, nothing is scaled in
    half = ElasticTiresiasPolicy((1000.0,), waiting_threshold=0, min_fraction=0.5)
    assert half.schedule(600.0, st) == {"u": 4, "v": 0, "x": 4}


def test_e_fifo_allocates_by_marginal_gain() -> None:
    # both start at min_res 1; gains (run time saved per extra GPU): a 1 -> 2: 2400 - 1600
    # = 800, b 1 -> 2: 1200 - 800 = 400, a 2 -> 4: (1600 - 1200) / 2 = 200: a 2, b 2.
    # b ends at 1200 / 1.5 = 800; at 840 a (1260 its done) takes 4: 1140 / 2.0 -> 1410.
    out = _finishes([_job("a", 0, 2400), _job("b", 0, 1200)], ElanPolicy(backfill=False))
    assert out == {"a": pytest.approx(1410), "b": pytest.approx(800)}


def _elan_jobs() -> list[Job]:
    a = _job("a", 0, 3000)  # min 2, max 2: 1.5 it/s -> 2000 s
    a.min_gpus = a.max_gpus = 2
    b = _job("b", 0, 1000)  # min 4: 500 s on 4
    b.min_gpus = 4
    c = _job("c", 0, 300)  # max 1: 300 s
    c.max_gpus = 1
    return [a, b, c]


def test_e_fifo_head_blocks_and_e_bf_backfills() -> None:
    # a starts on 2 GPUs; b needs 4: E-FIFO stops there, c waits behind b; 2 GPUs idle.
    # a ends at 2000, b starts at the next slot boundary (2040) on 4 -> 2540; c starts at
    # 2580 on 1 -> 2880.
    fifo = _finishes(_elan_jobs(), ElanPolicy(backfill=False))
    assert fifo == {"a": pytest.approx(2000), "b": pytest.approx(2540), "c": pytest.approx(2880)}
    # E-BF: b's estimated start is a's end (2000); c ends at 300 < 2000 on 1 GPU: it
    # starts now without delaying b.
    bf = _finishes(_elan_jobs(), ElanPolicy(backfill=True))
    assert bf == {"a": pytest.approx(2000), "b": pytest.approx(2540), "c": pytest.approx(300)}


def test_e_bf_does_not_backfill_a_job_that_would_delay_the_head() -> None:
    jobs = _elan_jobs()
    # c would end at 2100 > 2000 (b's estimated start) and b leaves no GPU over: c waits
    # for b as in E-FIFO (2580 + 2100 = 4680)
    jobs[2].iterations = 2100
    bf = _finishes(jobs, ElanPolicy(backfill=True))
    assert bf == {"a": pytest.approx(2000), "b": pytest.approx(2540), "c": pytest.approx(4680)}
