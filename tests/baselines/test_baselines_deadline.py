"""Chronus (deadline-aware, lease-based) on a small trace checked by hand."""

from __future__ import annotations

import pytest
from support.small_trace import finishes as _finishes
from support.small_trace import job as _job

from flowcon.alloc.types import ClusterState
from flowcon.baselines.deadline import ChronusPolicy


def test_slo_admission_by_lease_plan_and_best_effort_order() -> None:
    # a: SLO, 4 GPUs x 1200 s = leases 0 and 1, deadline 1200: admitted as SLO.
    # b: also all 4 GPUs for 600 s by 1200, but a holds both leases: run as best-effort.
    # c: best-effort, 2 GPUs x 200 s.
    # Leases 0, 1: a (SLO first). At 1200 a ends (met); best-effort by shortest run time:
    # c (200 s) on 2 GPUs, b (600 s) needs 4 and waits; c ends 1400, b starts at the next
    # decision (1440, mid-lease, free GPUs) and ends 2040 (missed).
    pol = ChronusPolicy(lease=600)
    jobs = [
        _job("a", 0, 2400, req=4, deadline=1200),
        _job("b", 0, 1200, req=4, deadline=1200),
        _job("c", 0, 300, req=2),
    ]
    out = _finishes(jobs, pol)
    assert out == {"a": pytest.approx(1200), "b": pytest.approx(2040), "c": pytest.approx(1400)}


def test_admission_counts_admitted_slo_work_and_deadlines() -> None:
    pol = ChronusPolicy(lease=600)
    st = ClusterState(total_gpus=4)
    a = _job("a", 0, 2400, req=4, deadline=1200)
    assert pol.on_submit(a, 0.0, st).admitted
    assert pol.slo == {"a"}
    st.jobs["a"] = a
    b = _job("b", 0, 1200, req=4, deadline=1200)
    assert pol.on_submit(b, 0.0, st).admitted
    assert "b" not in pol.slo  # best-effort
    # with a deadline one lease later b fits in lease 2 (1200-1800: 600 s x 2.0 = 1200 its)
    b2 = _job("b2", 0, 1200, req=4, deadline=1800)
    assert pol.on_submit(b2, 0.0, st).admitted
    assert "b2" in pol.slo
    st.jobs["b2"] = b2
    # a late job that no longer fits before b2's deadline either: best-effort
    late = _job("late", 0, 100, req=4, deadline=1800)
    assert pol.on_submit(late, 0.0, st).admitted
    assert "late" not in pol.slo
    pol.on_finish("a", 1200.0, st)
    assert pol.slo == {"b2"}
