"""SlotLedger._fill (step functions, bisection over the cap) against the slot-by-slot
ProgressiveFilling of the paper (flowcon.repro.paper_reference).

What must hold: for every job, occupied profile and instant, both give the same x_i(t) in
every slot from ``now`` to the deadline, or both say the job cannot be satisfied, provided
(1) the arithmetic is exact and (2) the overhead term is zero or the satisfaction test is
monotone in the cap. (1): the fast version sums iterations per run of equal slots
(``acc + n * per``, ``sum(T(level) * seconds)``), the reference slot by slot; with floats the
two sums can round to different sides of M_i when a job needs exactly what it gets, so the
strategies below draw throughputs, seconds and work on a dyadic grid where every sum is
exact. (2): with overhead, line 17 asks for M_i + 2 * overhead * T_i(j); that need grows with
the cap j, so "satisfied at j" need not be monotone in j. The paper scans j upwards and takes
the first that works; the fast version bisects (and gives up when the largest cap fails).
Whenever the test is monotone (always without overhead) both give the smallest satisfying
cap; when it is not, ``test_overhead_nonmonotone_relation`` states what still holds.
"""

from __future__ import annotations

import itertools
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from flowcon.alloc.admission_steps import _Profile
from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve
from flowcon.repro.paper_reference import _seconds, _usable, progressive_filling_reference

SLOT = 8.0  # seconds; with the quarter-second grid below every product and sum is exact


@st.composite
def curves(draw: st.DrawFn, total: int) -> ThroughputCurve:
    """Concave, linear, super-linear, flat and dipping curves (integer it/s)."""
    counts = draw(st.lists(st.integers(1, total), min_size=1, max_size=6, unique=True))
    return ThroughputCurve({n: draw(st.integers(1, 64)) for n in counts})


@st.composite
def cases(draw: st.DrawFn) -> dict[str, object]:
    total = draw(st.sampled_from([1, 2, 3, 4, 6, 8, 16]))
    curve = draw(curves(total))
    now_k = draw(st.integers(0, 3))
    now = now_k * SLOT + draw(st.integers(0, 31)) / 4  # inside slot now_k, quarter seconds
    n = draw(st.integers(1, 12))  # slots to the deadline
    deadline = (now_k + n - 1) * SLOT + draw(st.integers(1, 32)) / 4
    deadline = max(deadline, now + 0.25)
    steps = draw(st.lists(st.tuples(st.integers(1, 5), st.integers(0, total + 1)), max_size=5))
    occupied: list[int] = []
    for length, v in steps:
        occupied += [v] * length
    occupied = (occupied + [draw(st.integers(0, total))] * (n + 1))[: n + 1]
    work = draw(st.integers(1, 64 * 8 * 12)) / 4
    done = draw(st.integers(0, 3)) / 4
    return {
        "total": total,
        "job": Job("j", 0.0, work + done, deadline, curve, done_iterations=done),
        "now": now,
        "now_k": now_k,
        "occupied": occupied,
        "p2": draw(st.booleans()),
        "overhead": draw(st.sampled_from([0.0, 0.0, 0.5, 2.0, 8.0])),
    }


def _fast(c: dict[str, object]) -> list[int] | None:
    total, job, now, now_k = c["total"], c["job"], c["now"], c["now_k"]
    assert isinstance(total, int)
    assert isinstance(job, Job)
    assert isinstance(now_k, int)
    assert isinstance(now, float)
    assert isinstance(c["overhead"], float)
    ledger = SlotLedger(total, SLOT, overhead=c["overhead"], power_of_two=bool(c["p2"]))
    used = _Profile()
    occupied = c["occupied"]
    assert isinstance(occupied, list)
    used.add_all([([(now_k + t, now_k + t + 1, v, 0.0) for t, v in enumerate(occupied)], 1)], now_k)
    plan = ledger._fill(job, now_k, now, used)
    if plan is None:
        return None
    assert job.deadline is not None
    end_k = math.ceil(job.deadline / SLOT - 1e-9)
    if not plan.runs:
        return []
    assert plan.runs[-1][1] <= end_k
    return [plan.at(k) for k in range(now_k, end_k)]


def _reference(c: dict[str, object]) -> list[int] | None:
    job, now, occupied, total = c["job"], c["now"], c["occupied"], c["total"]
    assert isinstance(job, Job)
    assert isinstance(now, float)
    assert isinstance(total, int)
    assert isinstance(occupied, list)
    assert isinstance(c["overhead"], float)
    return progressive_filling_reference(
        job, now, occupied, total, SLOT, overhead=c["overhead"], power_of_two=bool(c["p2"])
    )


def _satisfied_by_cap(c: dict[str, object]) -> list[bool]:
    """Line 17's test for every cap j = 1..G (the whole horizon at x(t) = min(j, free))."""
    job, now, occupied, total = c["job"], c["now"], c["occupied"], c["total"]
    assert isinstance(job, Job)
    assert isinstance(now, float)
    assert isinstance(total, int)
    assert isinstance(occupied, list)
    assert isinstance(c["overhead"], float)
    assert job.deadline is not None
    now_k = int(c["now_k"])  # type: ignore[call-overload]
    end_k = math.ceil(job.deadline / SLOT - 1e-9)
    w = _seconds(job, now, now_k, end_k, 0.0, SLOT)
    cap, p2 = job.gpu_cap(total), bool(c["p2"])
    out = []
    for j in range(1, total + 1):
        gain = sum(
            _usable(job, cap, min(j, total - occupied[t]), p2)[1] * w[t] for t in range(len(w))
        )
        out.append(
            gain >= job.remaining * (1 - 1e-9) + 2 * c["overhead"] * _usable(job, cap, j, p2)[1]
        )
    return out


def _monotone(ok: list[bool]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(ok))


@settings(max_examples=400, deadline=None)
@given(cases())
def test_fast_filling_equals_the_papers_slot_by_slot_filling(c: dict[str, object]) -> None:
    if not _monotone(_satisfied_by_cap(c)):
        return  # covered by test_overhead_nonmonotone_relation
    assert _fast(c) == _reference(c)


@settings(max_examples=400, deadline=None)
@given(cases())
def test_overhead_nonmonotone_relation(c: dict[str, object]) -> None:
    """Without overhead the test is always monotone. With it, whatever the shape: the
    reference fails exactly when no cap satisfies line 17, the fast version exactly when the
    largest cap does not, so the fast version never admits what the reference rejects; and the
    reference's shares never exceed its cap, the smallest satisfying one."""
    ok = _satisfied_by_cap(c)
    if c["overhead"] == 0.0:
        assert _monotone(ok)
    fast, ref = _fast(c), _reference(c)
    assert (ref is None) == (not any(ok))
    assert (fast is None) == (not ok[-1])
    if ref is not None:
        assert max(ref, default=0) <= ok.index(True) + 1


def test_overhead_can_make_the_cap_test_nonmonotone() -> None:
    """The case the relation above is about, built by hand: 2 GPUs, linear curve, 8 s
    overhead (16 s of work asked at the cap's speed), free GPUs 1, 1, 2 over three 8 s slots,
    8 iterations. Cap 1: 24 it >= 8 + 16. Cap 2: 32 it < 8 + 32. The paper's scan admits at
    cap 1; the fast version bisects from the largest cap and rejects. A known difference."""
    job = Job("j", 0.0, 8.0, 24.0, ThroughputCurve({1: 1.0, 2: 2.0}))
    c: dict[str, object] = {
        "total": 2,
        "job": job,
        "now": 0.0,
        "now_k": 0,
        "occupied": [1, 1, 0],
        "p2": True,
        "overhead": 8.0,
    }
    assert _satisfied_by_cap(c) == [True, False]
    assert _reference(c) == [1, 1, 1]
    assert _fast(c) is None
