"""benchmarks/sweep_replay.py without an engine: points, plan, estimate, aggregation."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from benchmarks import sweep_replay as sweep
from flowcon.replay.model import JobRecord, RunResult


def run(policy: str, jcts: dict[str, float], alpha: float = 0.05, itval: float = 5) -> RunResult:
    r = RunResult("fixed", policy, "x", 0.0, 2, alpha, itval)
    r.jobs = [JobRecord(n, "img", 0.0, 0.0, jct, 0) for n, jct in jcts.items()]
    return r


def test_points_whole_grid_and_subset() -> None:
    assert len(sweep.parse_points(None)) == 20
    assert sweep.parse_points("5:20, 3:30") == [sweep.Point(0.05, 20), sweep.Point(0.03, 30)]
    for bad in ("5", "x:20", "0:20", "5:-1", "150:10"):
        with pytest.raises(ValueError, match="--points"):
            sweep.parse_points(bad)


def test_plan_alternates_and_estimates() -> None:
    a, b = sweep.Point(0.01, 10), sweep.Point(0.05, 20)
    assert sweep.plan([a, b], 2) == [(1, None), (1, a), (1, b), (2, None), (2, b), (2, a)]
    assert sweep.estimate_s(6, 0.25, 360) == pytest.approx(6 * (90 + sweep.OVERHEAD_S))


def test_dry_list_prints_plan_without_running(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        sweep.main(["--dry-list", "--time-scale", "0.25", "--work-scale", "0.25", "--repeat", "2"])
        == 0
    )
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 2 * 21 + 1
    assert out[1] == "rep 1: flowcon alpha 1 %, itval 10 s (runs with 2.5 s)"
    assert out[-1].startswith("42 runs, about 1.2 h")


def test_aggregate_pairs_each_point_with_its_repetitions_none_run(tmp_path: Path) -> None:
    """The compare's statistics (flowcon.replay.repeat): changes within a repetition,
    then median/min/max over repetitions."""
    p1, p2 = sweep.Point(0.05, 20), sweep.Point(0.01, 60)
    runs = [
        (1, None, run("none", {"vae": 100, "cnn": 200})),
        (1, p1, run("flowcon", {"vae": 50, "cnn": 210})),
        (1, p2, run("flowcon", {"vae": 105, "cnn": 180}, itval=15)),
        (2, None, run("none", {"vae": 110, "cnn": 190})),
        (2, p1, run("flowcon", {"vae": 66, "cnn": 228})),
    ]
    rows = sweep.aggregate(runs)
    assert [(r["alpha_pct"], r["itval"]) for r in rows] == [(1, 60), (5, 20)]
    r1, r5 = rows
    assert r1["repeats"] == 1
    assert r1["itval_run"] == 15
    assert r1["best_job"] == "cnn"
    assert r1["best_job_change_pct"] == pytest.approx(-10.0)
    assert r5["repeats"] == 2
    # vae: -50 % in rep 1, -40 % in rep 2 -> median -45 %; cnn: +5 %, +20 % -> +12.5 %
    assert r5["best_job"] == "vae"
    assert r5["best_job_change_pct"] == pytest.approx(-45.0)
    assert r5["worst_job"] == "cnn"
    assert r5["worst_job_change_pct"] == pytest.approx(12.5)
    # makespans: 200 -> 210 (+5 %) and 190 -> 228 (+20 %)
    assert r5["makespan_change_pct"] == pytest.approx(12.5)
    assert r5["makespan_change_min_pct"] == pytest.approx(5.0)
    assert r5["makespan_change_max_pct"] == pytest.approx(20.0)
    paths = sweep.write_outputs(rows, tmp_path, "fixed")
    table = list(csv.DictReader(paths[0].open()))
    assert [row["best_job"] for row in table] == ["cnn", "vae"]
    assert table[1]["makespan_change_pct"] == "12.5"
    assert table[1]["repeats"] == "2"
    assert all(p.stat().st_size > 3000 for p in paths[1:])
