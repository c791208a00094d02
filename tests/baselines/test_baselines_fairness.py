"""Themis (finish-time fairness) on small traces checked by hand."""

from __future__ import annotations

import pytest
from support.small_trace import finishes as _finishes
from support.small_trace import job as _job

from flowcon.baselines.fairness import ThemisPolicy, finish_time_fairness


def test_rho_is_shared_over_independent_time() -> None:
    j = _job("a", 0, 2400, req=4)  # alone on 4 GPUs: 2400 / 2.0 = 1200 s
    assert finish_time_fairness(j, 0.0, 4) == pytest.approx(1.0)
    j.done_iterations = 1200  # at 600 s: (600 + 1200 / 2.0) / 1200
    assert finish_time_fairness(j, 600.0, 4) == pytest.approx(1.0)
    assert finish_time_fairness(j, 1200.0, 4) == pytest.approx(1.5)  # waited 600 s more


def test_worst_rho_takes_the_gpus_at_each_lease() -> None:
    # a and b both want all 4 GPUs; rho ties at t=0 (1.0 each), a first by id, a runs
    # [0, 600]. Lease round at 600: rho_a = (600 + 1200/2)/1200 = 1.0, rho_b =
    # (600 + 1200/2)/600 = 2.0 -> b runs [600, 1200]; then a runs its last 1200 its
    # [1200, 1800]. (FIFO would end a at 1200 and b at 1800.)
    out = _finishes([_job("a", 0, 2400, req=4), _job("b", 0, 1200, req=4)], ThemisPolicy(600))
    assert out == {"a": pytest.approx(1800), "b": pytest.approx(1200)}


def test_running_jobs_keep_their_gpus_until_the_lease_ends() -> None:
    # c (30 s of work on 4 GPUs) arrives at 60 while a runs: it waits for the lease round
    # at 600, where rho_c = (540 + 30)/30 = 19 is the worst: c runs [600, 630]. At the
    # next decision (660, mid-lease) rho_b = (660 + 600)/600 = 2.1 > rho_a = 1.05: b runs
    # [660, 1260] (kept at the 1200 round: rho_b 2.1 > rho_a 1.5), a [1260, 1860].
    jobs = [_job("a", 0, 2400, req=4), _job("b", 0, 1200, req=4), _job("c", 60, 60, req=4)]
    out = _finishes(jobs, ThemisPolicy(600))
    assert out == {"a": pytest.approx(1860), "b": pytest.approx(1260), "c": pytest.approx(630)}
