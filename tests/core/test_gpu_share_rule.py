"""MPS shares of one GPU's tenants from their Algorithm 1 limits, and the restart rule."""

from __future__ import annotations

import pytest

from flowcon.core.gpu_share import (
    MIB,
    Share,
    Tenant,
    decide,
    effective,
    env,
    memory_limit,
    percentages,
)

GPU = 80 << 30


def test_percentages_follow_the_limits() -> None:
    assert percentages({"nl": 0.75, "cl": 0.25}) == {"nl": 75, "cl": 25}
    assert percentages({"alone": 0.3}) == {"alone": 100}
    assert percentages({"a": 0.99, "b": 0.001}, min_pct=5) == {"a": 100, "b": 5}
    assert percentages({"a": 0.0, "b": 0.0}) == {"a": 100, "b": 100}


def test_unlimited_tenants_share_by_contention() -> None:
    assert effective({"a": 100, "b": 100}) == {"a": 50.0, "b": 50.0}
    assert effective({"a": 75, "b": 25}) == {"a": 75.0, "b": 25.0}
    assert effective({"a": 60, "b": 60}) == {"a": 50.0, "b": 50.0}


def test_memory_limit_leaves_room_and_stays_within_the_gpu() -> None:
    assert memory_limit(4 << 30, GPU) == 5 << 30  # 1.25 x what it uses
    assert memory_limit(0, GPU) == 1024 * MIB  # the floor
    assert memory_limit(100 << 30, GPU) == GPU
    assert memory_limit(1, GPU) % MIB == 0


def test_the_clients_environment() -> None:
    assert env(Share(25, 2048 * MIB)) == {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "25",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=2048M",
    }
    assert env(Share(25, 1024 * MIB), (0, 1))["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == (
        "0=1024M,1=1024M"
    )


def test_a_converged_job_gives_way_when_the_gain_pays_for_the_restarts() -> None:
    """NL (G 1) and CL (G ~0) on one GPU, both unlimited: 75/25 lifts the useful rate from
    50 to 75 (+50 %); over a 320 s horizon that is 160 s, against 2 x 20 s of restarts."""
    tenants = [
        Tenant("nl", 0.75, 1.0, 4 << 30, restart_cost_s=20.0),
        Tenant("cl", 0.25, 0.0, 2 << 30, restart_cost_s=20.0),
    ]
    d = decide(tenants, GPU, horizon_s=320.0, default_cost_s=60.0)
    assert d.apply
    assert {c: s.pct for c, s in d.shares.items()} == {"nl": 75, "cl": 25}
    assert d.gain_s == pytest.approx(160.0)
    assert d.cost_s == pytest.approx(40.0)
    # a short horizon does not pay for them: back off, decide again next round
    short = decide(tenants, GPU, horizon_s=60.0, default_cost_s=60.0)
    assert not short.apply
    assert short.gain_s == pytest.approx(30.0)
    assert "does not pay" in short.reason
    # unknown restart costs count the default
    unknown = [Tenant(t.cid, t.limit, t.g, t.mem_bytes) for t in tenants]
    assert decide(unknown, GPU, 320.0, default_cost_s=100.0).cost_s == 200.0
    assert not decide(unknown, GPU, 320.0, default_cost_s=100.0).apply


def test_nothing_to_do_when_the_shares_are_in_effect() -> None:
    first = decide(
        [Tenant("a", 0.5, 1.0, 1 << 30), Tenant("b", 0.5, 1.0, 1 << 30)], GPU, 320.0, 0.0
    )
    running = [
        Tenant("a", 0.5, 1.0, 1 << 30, pct=50, mem_limit=first.shares["a"].mem_limit),
        Tenant("b", 0.5, 1.0, 1 << 30, pct=50, mem_limit=first.shares["b"].mem_limit),
    ]
    d = decide(running, GPU, 320.0, 0.0)
    assert not d.apply
    assert d.reason == "shares unchanged"


def test_equal_jobs_gain_nothing_from_equal_caps() -> None:
    """Two equally young jobs: 50/50 caps change nothing of their contention split, so
    no restart is worth it."""
    d = decide([Tenant("a", 0.5, 1.0, 1 << 30), Tenant("b", 0.5, 1.0, 1 << 30)], GPU, 320.0, 1.0)
    assert d.gain_s == pytest.approx(0.0)
    assert not d.apply
