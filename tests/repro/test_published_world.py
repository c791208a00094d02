"""Calibration gate of ``--world published``: the published ElasticFlow simulator's ratios
(shared/data/README.md) reproduced within +-0.02 on 195job (16x8) and cluster01 (64x8).

Where a policy does not reach the gate the test is a strict xfail whose reason states the
measured value and what is known of the cause; the tolerance is never widened.
"""

from __future__ import annotations

import pytest

from flowcon.sim.cli import SHARED, run_simulation

TRACES = SHARED / "data/elasticflow-traces"
TOL = 0.02
PUBLISHED = {
    ("195job", "16x8"): {
        "edf": 0.097,
        "gandiva": 0.241,
        "tiresias": 0.492,
        "elasticflow-published": 0.877,
    },
    ("cluster01", "64x8"): {
        "edf": 0.187,
        "gandiva": 0.162,
        "tiresias": 0.493,
        "elasticflow-published": 0.848,
    },
}
XFAIL: dict[tuple[str, str], str] = {}
# the published simulator's own ElasticFlow loop on cluster01 takes minutes (as its code
# does: 1,815 s there); CI runs it beside the fast lane's other pure tests
SLOW = {("cluster01", "elasticflow-published")}

needs_traces = pytest.mark.skipif(
    not (TRACES / "195job.csv").is_file(), reason="shared traces not present"
)


def _cases() -> list[object]:
    out: list[object] = []
    for (trace, cluster), ratios in PUBLISHED.items():
        for policy, ref in ratios.items():
            why = XFAIL.get((trace, policy))
            marks = [pytest.mark.xfail(strict=True, reason=why)] if why else []
            if (trace, policy) in SLOW:
                marks += [pytest.mark.slow, pytest.mark.calibration]
            out.append(
                pytest.param(trace, cluster, policy, ref, marks=marks, id=f"{trace}-{policy}")
            )
    return out


@needs_traces
@pytest.mark.parametrize(("trace", "cluster", "policy", "ref"), _cases())
def test_published_world_matches_published_ratio(
    trace: str, cluster: str, policy: str, ref: float
) -> None:
    _, s = run_simulation(str(TRACES / f"{trace}.csv"), cluster, policy, world="published")
    ratio = s["deadline_satisfactory_ratio"]
    assert isinstance(ratio, float)
    assert abs(ratio - ref) <= TOL, f"{policy} on {trace}: {ratio} vs published {ref}"


@pytest.mark.parametrize("rotating", [False, True])
def test_gandiva_time_shares_a_full_node(rotating: bool) -> None:
    """Nine 1-GPU jobs of 3,600 s on one 8-GPU node: seven fill a node set by first fit
    (util + 1 < capacity), the eighth and ninth time-share it, eight run at a time. On a
    clock off the whole minute nobody rotates: eight end at +3,600 s, the ninth waits; on
    whole minutes the running ones rotate every step and all nine share 8 GPUs (~4,050 s)."""
    from flowcon.alloc.model import Job, ThroughputCurve, Topology
    from flowcon.repro.published_baselines import simulate_gandiva

    t0 = 0.0 if rotating else 1.0
    jobs = [
        Job(
            job_id=f"j{i}",
            submit_time=t0,
            iterations=1.0,
            deadline=t0 + 4000.0,
            curve=ThroughputCurve({1: 1.0}),
            requested_gpus=1,
            duration=3600.0,
        )
        for i in range(9)
    ]
    res = simulate_gandiva(jobs, Topology.from_spec("1x8"))
    met = sorted(r.job.job_id for r in res.results if r.met_deadline)
    if rotating:
        assert met == []
        assert all(r.finish is not None and r.finish <= t0 + 4200 for r in res.results)
    else:
        assert met == [f"j{i}" for i in range(8)]
        assert res.results[8].finish == pytest.approx(t0 + 7200)


def test_tiresias_demotes_by_gpu_seconds() -> None:
    """A 4-GPU job crosses 3,250 GPU-seconds after 813 s and drops behind a newcomer."""
    from flowcon.alloc.model import Job, ThroughputCurve, Topology
    from flowcon.repro.published_baselines import simulate_tiresias

    curve = ThroughputCurve({1: 1.0, 4: 4.0})

    def job(name: str, t: float, gpus: int, dur: float) -> Job:
        return Job(
            job_id=name,
            submit_time=t,
            iterations=1.0,
            deadline=t + 100000,
            curve=curve,
            requested_gpus=gpus,
            duration=dur,
        )

    res = simulate_tiresias(
        [job("big", 0, 4, 5000), job("late", 1000, 4, 600)], Topology.from_spec("1x4")
    )
    by = {r.job.job_id: r for r in res.results}
    assert by["late"].start is not None
    assert by["late"].finish is not None
    assert by["big"].finish is not None
    assert by["late"].finish < by["big"].finish
