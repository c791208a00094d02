"""Every deadline and elastic baseline (themis, chronus, pollux, elastic-tiresias, e-fifo, e-bf)
runs a slice of the 195-job trace in both worlds through ``flowcon simulate``'s path, and
its outputs are sane: every job accounted for and finished, never more GPUs busy than the
cluster has."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.sim.cli import SHARED, run_simulation, simulate
from flowcon.sim.engine import SimResult

TRACE = SHARED / "data/elasticflow-traces/195job.csv"
NEW = ("themis", "chronus", "pollux", "elastic-tiresias", "e-fifo", "e-bf")
SLICE = 80  # jobs
CLUSTER = "4x8"  # 32 GPUs: enough contention that jobs wait, shrink and grow

needs_trace = pytest.mark.skipif(not TRACE.is_file(), reason="shared traces not present")


@pytest.fixture(scope="module")
def slice_csv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    lines = TRACE.read_text().splitlines()
    out = tmp_path_factory.mktemp("trace") / "195job-slice.csv"
    out.write_text("\n".join(lines[: SLICE + 1]) + "\n")
    return out


@needs_trace
@pytest.mark.parametrize("world", ["ours", "published"])
@pytest.mark.parametrize("policy", NEW)
def test_baseline_runs_a_195job_slice_sanely(slice_csv: Path, policy: str, world: str) -> None:
    res, summary = run_simulation(str(slice_csv), CLUSTER, policy, world=world)
    assert isinstance(res, SimResult)
    assert res.policy == policy
    ids = [line.split(",")[0] for line in slice_csv.read_text().splitlines()[1:]]
    assert sorted(r.job.job_id for r in res.results) == sorted(ids)
    assert summary["jobs"] == SLICE
    assert summary["admitted"] == SLICE  # none drops jobs
    for r in res.results:
        j = r.job
        assert r.admitted, (j.job_id, r.reason)
        assert r.finish is not None, (j.job_id, r.reason)
        assert r.start is not None
        assert j.submit_time <= r.start <= r.finish
        assert j.done_iterations == pytest.approx(j.iterations)
        assert r.gpu_seconds > 0
    total = res.topology.total_gpus
    assert res.timeline
    assert max(busy for _, busy, _, _ in res.timeline) <= total
    assert all(0 <= eff <= 1.0 + 1e-9 for _, _, eff, _ in res.timeline)
    with_deadline = [r for r in res.results if r.job.deadline is not None]
    met = sum(r.met_deadline for r in with_deadline)
    assert summary["deadlines_met"] == met
    assert summary["deadline_satisfactory_ratio"] == pytest.approx(
        met / len(with_deadline), abs=1e-3
    )


@needs_trace
def test_pollux_puts_each_jobs_own_curve_back(slice_csv: Path) -> None:
    """Pollux runs a job on its goodput curve (best batch per GPU count) and restores the
    table row of its submitted batch when it finishes."""
    from flowcon.sim.cli import DEFAULT_THROUGHPUTS
    from flowcon.sim.loaders import load_throughputs

    res, _ = run_simulation(str(slice_csv), CLUSTER, "pollux")
    assert isinstance(res, SimResult)
    tables = load_throughputs(DEFAULT_THROUGHPUTS)  # loaded afresh: compare the points
    for r in res.results:
        assert dict(r.job.curve.points) == dict(tables[r.job.model][r.job.batch_size].points)


@needs_trace
@pytest.mark.parametrize("policy", NEW)
def test_simulate_command_accepts_the_baseline(slice_csv: Path, policy: str) -> None:
    for world in ("ours", "published"):
        out = CliRunner().invoke(
            simulate,
            ["--trace", str(slice_csv), "--cluster", CLUSTER, "--policy", policy,
             "--world", world],
        )  # fmt: skip
        assert out.exit_code == 0, out.output
        summary = json.loads(out.output.strip().splitlines()[-1])
        assert summary["jobs"] == SLICE
        assert summary["world"] == world
