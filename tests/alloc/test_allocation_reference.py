"""``distribute_spare`` (per-curve step tables and chains, every step sorted once in the
heap's pop order) against the greedy loop as written
(``flowcon.repro.paper_reference.distribute_spare_reference``): the same allocation, GPU for GPU.

The strategies mix concave curves with curves whose gains rise again (a step better than
its predecessor, which the heap pops right after it), remaining work small enough to cap a
step's return within the next slot, jobs sharing one curve object (its cached tables are
shared) and the same jobs asked again after progress (cached tables reused with another
remaining work)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowcon.alloc.allocation import distribute_spare
from flowcon.alloc.model import Job, ThroughputCurve, floor_power_of_two
from flowcon.repro.paper_reference import distribute_spare_reference

SLOT = 60.0


@st.composite
def curve(draw: st.DrawFn) -> ThroughputCurve:
    """Throughput at powers of two up to 64; gains may shrink (concave) or rise again."""
    t = draw(st.floats(0.5, 5.0))
    pts = {1: t}
    n = 2
    while n <= 64:
        if draw(st.integers(0, 5)) == 0:
            pts[n] = t  # flat: no faster step here
        else:
            t *= 1.0 + draw(st.floats(0.01, 1.0))
            pts[n] = t
        n *= 2
    return ThroughputCurve(pts)


@st.composite
def cluster(draw: st.DrawFn) -> tuple[list[Job], dict[str, int], int]:
    total = draw(st.sampled_from([8, 16, 32, 64, 128]))
    shared = draw(st.lists(curve(), min_size=1, max_size=3))
    jobs: list[Job] = []
    base: dict[str, int] = {}
    left = total
    for i in range(draw(st.integers(1, 8))):
        c = draw(st.sampled_from(shared))
        # remaining work from a fraction of one slot at one GPU (caps the return) upwards
        its = c.at(1) * SLOT * draw(st.sampled_from([0.3, 1.0, 2.5, 40.0, 1e4]))
        kind = draw(st.integers(0, 2))
        deadline = None if kind == 2 else draw(st.floats(100.0, 1e5))
        job = Job(f"j{i}", float(draw(st.integers(0, 3))), its, deadline, c)
        job.soft_deadline = kind == 1
        job.min_gpus = draw(st.sampled_from([1, 1, 2, 3]))
        if draw(st.booleans()):
            job.max_gpus = draw(st.sampled_from([1, 4, 16]))
        n = floor_power_of_two(draw(st.integers(0, max(0, left))))
        base[job.job_id] = n
        left -= n
        jobs.append(job)
    return jobs, base, total


@settings(max_examples=400, deadline=None)
@given(cluster(), st.floats(0.0, 0.99))
def test_distribute_spare_matches_the_greedy_loop(
    c: tuple[list[Job], dict[str, int], int], progress: float
) -> None:
    jobs, base, total = c
    assert distribute_spare(jobs, base, total, SLOT) == distribute_spare_reference(
        jobs, base, total, SLOT
    )
    for j in jobs:  # progress: the cached tables are asked again with less work left
        j.done_iterations = j.iterations * progress
    assert distribute_spare(jobs, base, total, SLOT) == distribute_spare_reference(
        jobs, base, total, SLOT
    )


@settings(max_examples=200, deadline=None)
@given(cluster(), st.floats(0.0, 0.99))
def test_a_roomy_cluster_gives_every_job_its_last_step_as_the_loop_does(
    c: tuple[list[Job], dict[str, int], int], progress: float
) -> None:
    """The same jobs on 1,024 GPUs: every step of every job fits (at most 8 jobs of 64),
    the path that takes them all without sorting; the loop as written agrees, and no job
    can be given more (one more GPU step would not make it faster or is over its cap)."""
    jobs, base, _ = c
    for j in jobs:
        j.done_iterations = j.iterations * progress
    total = 1024
    got = distribute_spare(jobs, base, total, SLOT)
    assert got == distribute_spare_reference(jobs, base, total, SLOT)
    assert sum(got.values()) < total
    more = distribute_spare(jobs, base, 2 * total, SLOT)
    assert more == got


def test_jobs_with_one_id_twice_are_refused() -> None:
    """The GPU counts are kept per position in ``jobs``: one id twice would count its
    minimum share twice, so it is refused by name."""
    c = ThroughputCurve({1: 1.0, 2: 1.8})
    jobs = [Job("a", 0.0, 1e4, None, c), Job("a", 0.0, 1e4, None, c)]
    with pytest.raises(ValueError, match="distinct"):
        distribute_spare(jobs, {"a": 1}, 8, SLOT)
