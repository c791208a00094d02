"""Algorithm 2's two priorities: the paper's (GPU time saved by one more GPU step after
re-running progressive filling, ``distribute_spare_paper``) and the fast one (next-slot
iterations per extra GPU / T(1), ``distribute_spare``).

What holds between them, on random concave curves and random minimum shares: they order the
jobs differently, but both hand out the same kind of allocation (every job keeps its
minimum share, powers of two, within the cluster). The paper's is work-conserving (it stops
only when no job's next faster step fits in the GPUs left); the fast one also leaves a job
alone once more GPUs would not add iterations in the next slot (it finishes within it
anyway). So for one job the paper's allocation is at least the fast one's, and the same
when the job cannot finish within the next slot.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from flowcon.alloc.allocation import distribute_spare, distribute_spare_paper, paper_rank
from flowcon.alloc.ledger import SlotLedger
from flowcon.alloc.model import Job, ThroughputCurve, is_power_of_two
from flowcon.repro.paper_reference import distribute_spare_paper_reference

SLOT = 60.0
TOTAL = 16


@st.composite
def concave_curve(draw: st.DrawFn) -> ThroughputCurve:
    """Throughput at 1, 2, 4, 8, 16 GPUs with shrinking gains (concave in log2 n)."""
    t = draw(st.floats(0.5, 5.0))
    pts = {1: t}
    gain = draw(st.floats(0.3, 1.0))
    n = 2
    while n <= TOTAL:
        t += t * gain
        pts[n] = t
        gain *= draw(st.floats(0.2, 0.9))
        n *= 2
    return ThroughputCurve(pts)


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[Job], dict[str, int], SlotLedger]:
    k = draw(st.integers(1, 5))
    jobs: list[Job] = []
    for i in range(k):
        curve = draw(concave_curve())
        its = draw(st.floats(100.0, 50000.0))
        slack = draw(st.floats(1.05, 4.0))
        deadline = None if draw(st.booleans()) else its / curve.at(TOTAL) * slack
        jobs.append(Job(f"j{i}", 0.0, its, deadline, curve))
    ledger = SlotLedger(TOTAL, SLOT)
    by_id = {j.job_id: j for j in jobs}
    for j in jobs:
        ledger.try_admit(j, by_id, 0.0)
    base = {j.job_id: ledger.share(j.job_id, 0.0) for j in jobs}
    if sum(base.values()) > TOTAL:
        base = {jid: 0 for jid in base}
    return jobs, base, ledger


def _check(jobs: list[Job], base: dict[str, int], alloc: dict[str, int], *, fast: bool) -> None:
    assert sum(alloc.values()) <= TOTAL
    spare = TOTAL - sum(alloc.values())
    for j in jobs:
        n = alloc[j.job_id]
        assert n >= base[j.job_id]
        assert n == 0 or is_power_of_two(n)
        nxt = j.curve.next_faster(n, j.gpu_cap(TOTAL)) if n else 1
        if nxt is None or nxt - n > spare:
            continue  # no next faster step fits in what is left
        # only the fast priority stops earlier: the step adds nothing in the next slot
        r = j.remaining
        assert fast
        assert min(r, j.curve.at(nxt) * SLOT) <= min(r, j.curve.at(n) * SLOT)


@settings(max_examples=150, deadline=None)
@given(cluster())
def test_both_priorities_hand_out_valid_work_conserving_allocations(
    c: tuple[list[Job], dict[str, int], SlotLedger],
) -> None:
    jobs, base, ledger = c
    _check(jobs, base, distribute_spare(jobs, base, TOTAL, SLOT), fast=True)
    paper = distribute_spare_paper(jobs, base, TOTAL, SLOT, 0.0, ledger)
    _check(jobs, base, paper, fast=False)


@settings(max_examples=100, deadline=None)
@given(concave_curve(), st.floats(100.0, 50000.0))
def test_one_job_gets_at_least_as_much_from_the_paper(curve: ThroughputCurve, its: float) -> None:
    job = Job("a", 0.0, its, None, curve)
    ledger = SlotLedger(TOTAL, SLOT)
    fast = distribute_spare([job], {"a": 0}, TOTAL, SLOT)["a"]
    paper = distribute_spare_paper([job], {"a": 0}, TOTAL, SLOT, 0.0, ledger)["a"]
    assert paper >= fast
    if its > curve.at(TOTAL) * SLOT:  # cannot finish within the next slot at any count
        assert paper == fast


def test_paper_rank_prefers_the_job_that_wastes_less_gpu_time() -> None:
    """Two best-effort jobs with a lot of work left at 1 GPU: one scales almost linearly,
    the other barely. One more GPU costs the first ~nothing in GPU time, the second much:
    the paper's rank (GPU time saved per extra GPU) prefers the first."""
    linear = Job("lin", 0.0, 1e6, None, ThroughputCurve({1: 1.0, 2: 1.98}))
    flat = Job("flat", 0.0, 1e6, None, ThroughputCurve({1: 1.0, 2: 1.1}))
    ledger = SlotLedger(TOTAL, SLOT)
    assert paper_rank(ledger, linear, 1, 2, 0.0, SLOT) > paper_rank(ledger, flat, 1, 2, 0.0, SLOT)
    alloc = distribute_spare_paper([flat, linear], {"lin": 1, "flat": 1}, 3, SLOT, 0.0, ledger)
    assert alloc == {"lin": 2, "flat": 1}


@settings(max_examples=150, deadline=None)
@given(cluster(), st.sampled_from([0, 2, 4, 8, 12, 16]))
def test_the_paper_loop_equals_its_reference_that_ranks_every_step(
    c: tuple[list[Job], dict[str, int], SlotLedger], held: int
) -> None:
    """``distribute_spare_paper`` neither pushes nor ranks a step larger than the spare
    GPUs (they only shrink, so the loop would pass over it): the same allocation as the
    loop that ranks every step. ``held``: GPUs a best-effort job already holds, so that
    few or no GPUs are spare."""
    jobs, base, ledger = c
    room = TOTAL - sum(base.values())
    if held and held <= room:
        jobs = [*jobs, Job("holder", 0.0, 1e6, None, ThroughputCurve({1: 1.0, 16: 16.0}))]
        base = {**base, "holder": held}
    got = distribute_spare_paper(jobs, base, TOTAL, SLOT, 0.0, ledger)
    assert got == distribute_spare_paper_reference(jobs, base, TOTAL, SLOT, 0.0, ledger)
