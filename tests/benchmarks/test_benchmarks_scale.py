"""benchmarks/bench_scale.py: its ``--quick`` mode end to end (a test of the benchmark,
not of its figures), the trace scaling and the decision hash it compares."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import bench_scale as bench
from benchmarks.decision_hash import decisions_hash
from flowcon.sim.cli import SHARED

REPO = Path(__file__).resolve().parents[2]
TRACE = SHARED / "data/elasticflow-traces/cluster04.csv"


@pytest.fixture
def trace() -> Path:
    if not TRACE.is_file():
        pytest.skip(f"{TRACE} not available")
    return TRACE


def test_the_trace_is_thinned_or_replicated_to_the_cluster(trace: Path) -> None:
    base = bench.scaled_trace(trace, 1024, None, 6 * 3600.0, 7.0)
    half = bench.scaled_trace(trace, 512, None, 6 * 3600.0, 7.0)
    double = bench.scaled_trace(trace, 2048, None, 6 * 3600.0, 7.0)
    assert len(half) == pytest.approx(len(base) / 2, abs=2)
    assert len(base) - 2 <= len(double) / 2 <= len(base)
    for specs in (base, half, double):
        times = [s.submit_time for s in specs]
        assert times == sorted(times)
        assert all(t % bench.SLOT == 0 for t in times)  # on the simulator's slot grid
        assert all(s.deadline is None or s.deadline > s.submit_time for s in specs)
        assert len({s.name for s in specs}) == len(specs)


def test_the_decision_hash_sees_one_changed_gpu_count() -> None:
    admitted = {"a": True, "b": False}
    one = {0.0: {"a": 2}, 60.0: {"a": 4}}
    assert decisions_hash(admitted, one) == decisions_hash(dict(admitted), {**one})
    assert decisions_hash(admitted, one) != decisions_hash(admitted, {**one, 60.0: {"a": 2}})
    assert decisions_hash(admitted, one) != decisions_hash({**admitted, "b": True}, one)


def test_quick_mode_runs_every_phase(trace: Path, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    out = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/bench_scale.py"), "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["bench"] == "allocator-scale"
    assert report["quick"] is True
    (row,) = report["sizes"]
    assert row["gpus"] == 128
    assert row["jobs"] > 0
    assert row["parity"] is True
    assert row["replay"]["decisions_hash"] == row["simulate"]["decisions_hash"]
    assert row["replay"]["rounds"] >= row["simulate"]["decisions"]
    load = row["load"]
    assert load["active_in_rounds"] >= load["active"] >= 50
    assert load["rounds"] > 0
    assert load["jobs_get"]["n"] > 0
    assert load["submit"]["n"] > 0
    assert load["measurements"]["n"] > 0
    assert load["rss_mib"] > 0
    assert load["restart_s"] > 0
    assert load["integrity"] == "ok"
    assert load["lost_after_kill"] == 0
    assert load["acked_submits"] > 0
