"""``flowcon simulate --batch-ranges`` with the batch-size-aware policies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.sim.cli import simulate

# one job, 1 GPU: 1200 iterations of batch 4 by t=100 s. At 4 (10 it/s) it takes 120 s; at
# 8 (7 it/s = 56 samples/s) its 4800 samples take 85.7 s; the default range of 4 is 2..8.
TRACE = (
    "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu\n"
    "a,0,1200,m,100,4,1\n"
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    tables = tmp_path / "tp"
    tables.mkdir()
    (tables / "m.csv").write_text("global_batch_size,1\n4,10.0\n8,7.0\n")
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    return trace, tables


def _ratio(files: tuple[Path, Path], *args: str) -> float:
    trace, tables = files
    base = ["--trace", str(trace), "--throughputs", str(tables), "--cluster", "1x1"]
    res = CliRunner().invoke(simulate, [*base, "--overhead", "0", "--no-progress", *args])
    assert res.exit_code == 0, res.output
    return float(json.loads(res.output.strip().splitlines()[-1])["deadline_satisfactory_ratio"])


def test_batch_ranges_flag(files: tuple[Path, Path]) -> None:
    assert _ratio(files, "--policy", "elasticflow-batch", "--batch-ranges") == 1.0
    assert _ratio(files, "--policy", "elasticflow-batch") == 0.0  # no range: fixed batch
    assert _ratio(files, "--policy", "elasticflow", "--batch-ranges") == 0.0
    # saxena-dp admits it (no deadlines) and runs it at 8 on its one GPU: 85.7 s
    assert _ratio(files, "--policy", "saxena-dp", "--batch-ranges") == 1.0
    # the fixed-batch baselines, in the published world: Min-BS at 4 misses (120 s),
    # Max-BS at 8 makes it
    pub = ("--batch-ranges", "--world", "published")
    assert _ratio(files, "--policy", "min-bs", *pub) == 0.0
    assert _ratio(files, "--policy", "max-bs", *pub) == 1.0
