"""The simulator on a small hand-checked trace, input errors, and the CLI contract."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from flowcon.alloc.model import Topology
from flowcon.policy_registry import make_policy
from flowcon.sim.cli import simulate
from flowcon.sim.engine import Simulator
from flowcon.sim.loaders import InputError, load_throughputs, load_trace

HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n"
# a: 1 GPU x 3600 s before its deadline; b: asks for 4 GPUs, loose deadline;
# c: arrives when the cluster is idle and cannot make its deadline even on 4 GPUs.
TRACE = HEADER + (
    "a,0,3600,m,3600,32,1,3600\nb,0,3600,m,7200,32,4,1800\nc,10000,100000,m,10600,32,1,1\n"
)


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    tables = tmp_path / "tp"
    tables.mkdir()
    (tables / "m.csv").write_text("global_batch_size,1,2,4\n32,1.0,1.5,2.0\n")
    trace = tmp_path / "t.csv"
    trace.write_text(TRACE)
    return trace, tables


def _run(files: tuple[Path, Path], policy: str) -> dict[str, tuple[bool, float | None]]:
    trace, tables = files
    jobs = load_trace(trace, load_throughputs(tables))
    res = Simulator(jobs, Topology.from_spec("1x4"), make_policy(policy), slot=60.0).run()
    return {r.job.job_id: (r.admitted, r.finish) for r in res.results}


def test_gandiva_static_fifo(files: tuple[Path, Path]) -> None:
    out = _run(files, "gandiva")
    # a on 1 GPU [0, 3600]; b needs all 4 and waits for a, then 3600 it / 2.0 it/s
    assert out["a"] == (True, pytest.approx(3600))  # type: ignore[comparison-overlap]
    assert out["b"] == (True, pytest.approx(5400))  # type: ignore[comparison-overlap]
    assert out["c"] == (True, pytest.approx(10020 + 100000))  # type: ignore[comparison-overlap]  # next slot boundary, 1 GPU


def test_tiresias_same_as_fifo_here(files: tuple[Path, Path]) -> None:
    out = _run(files, "tiresias")
    assert out["a"][1] == pytest.approx(3600)
    assert out["b"][1] == pytest.approx(5400)


def test_edf_gives_earliest_deadline_everything(files: tuple[Path, Path]) -> None:
    out = _run(files, "edf")
    assert out["a"][1] == pytest.approx(1800)  # 4 GPUs at 2.0 it/s
    assert out["b"][1] == pytest.approx(3600)
    assert out["c"] == (True, pytest.approx(10020 + 50000))  # type: ignore[comparison-overlap]


def test_elasticflow_shares_and_drops(files: tuple[Path, Path]) -> None:
    out = _run(files, "elasticflow")
    # a's min share is 1 GPU, b's is 0 now; spare GPUs: 1 each, then 1 -> 2 each (return 0.5)
    assert out["a"][1] == pytest.approx(2400)
    assert out["b"][1] == pytest.approx(2400)
    assert out["c"] == (False, None)
    ea = _run(files, "edf-admission")
    assert ea["c"] == (False, None)
    assert ea["a"][1] == pytest.approx(1800)


def test_trace_errors_name_row_and_column(tmp_path: Path, files: tuple[Path, Path]) -> None:
    _, tables = files
    tb = load_throughputs(tables)
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "a,0,10,m,100,32,1,1\nb,zero,10,m,100,32,1,1\n")
    with pytest.raises(InputError, match=r"row 3, column 'submission_time'"):
        load_trace(bad, tb)
    bad.write_text(HEADER + "a,0,10,nosuch,100,32,1,1\n")
    with pytest.raises(InputError, match=r"row 2, column 'model_name'"):
        load_trace(bad, tb)
    bad.write_text(HEADER + "a,0,10,m,100,48,1,1\n")
    with pytest.raises(InputError, match=r"row 2, column 'batch_size'"):
        load_trace(bad, tb)
    bad.write_text("job_id,submission_time\na,0\n")
    with pytest.raises(InputError, match=r"row 1, column 'num_iteration'"):
        load_trace(bad, tb)


def test_table_errors_name_row_and_column(tmp_path: Path) -> None:
    d = tmp_path / "tp"
    d.mkdir()
    (d / "m.csv").write_text("global_batch_size,1,2,4\n32,1.0,fast,2.0\n")
    with pytest.raises(InputError, match=r"m.csv, row 2, column '2'"):
        load_throughputs(d)
    (d / "m.csv").write_text("global_batch_size,1,two\n32,1.0,2.0\n")
    with pytest.raises(InputError, match=r"row 1, column 'two'"):
        load_throughputs(d)
    (d / "m.csv").write_text("global_batch_size,1,2\n32,nan,\n")
    with pytest.raises(InputError, match=r"row 2"):
        load_throughputs(d)


def _simulate_out(files: tuple[Path, Path], out: Path, *extra: str) -> Result:
    """``flowcon simulate`` of the three-job fixture on 1x4 into ``out``."""
    trace, tables = files
    args = ["--trace", str(trace), "--cluster", "1x4", "--throughputs", str(tables)]
    res = CliRunner().invoke(simulate, [*args, "--out", str(out), *extra])
    assert res.exit_code == 0, res.output
    return res


def test_cli_last_line_json_and_outputs(tmp_path: Path, files: tuple[Path, Path]) -> None:
    out = tmp_path / "out"
    res = _simulate_out(files, out, "--policy", "elasticflow")
    summary = json.loads(res.output.strip().splitlines()[-1])
    assert summary["deadline_satisfactory_ratio"] == pytest.approx(2 / 3, abs=1e-3)
    assert summary["jobs"] == 3
    assert summary["admitted"] == 2
    assert summary["wall_seconds"] >= 0
    assert (out / "jobs.csv").read_text().count("\n") == 4
    assert (out / "cluster.png").stat().st_size > 0
    assert (out / "jobs.png").exists()
    assert f"wrote {out}/: jobs.csv, summary.json, cluster.png, jobs.png" in res.output


def test_cli_says_what_it_wrote(tmp_path: Path, files: tuple[Path, Path]) -> None:
    """Without plots only the CSV and the summary are named (it used to say "*.png")."""
    out = tmp_path / "out"
    res = _simulate_out(files, out, "--no-plots")
    assert f"wrote {out}/: jobs.csv, summary.json\n" in res.output
    assert not list(out.glob("*.png"))


def test_cli_malformed_input_exits_cleanly(tmp_path: Path, files: tuple[Path, Path]) -> None:
    _, tables = files
    bad = tmp_path / "bad.csv"
    bad.write_text(HEADER + "a,0,ten,m,100,32,1,1\n")
    res = CliRunner().invoke(
        simulate, ["--trace", str(bad), "--cluster", "1x4", "--throughputs", str(tables)]
    )
    assert res.exit_code != 0
    assert "row 2" in res.output
    assert "num_iteration" in res.output
    assert "Traceback" not in res.output


def test_simulation_path_imports_neither_numpy_nor_matplotlib(
    tmp_path: Path, files: tuple[Path, Path]
) -> None:
    """Process start is most of a small run's time: the simulate path stays stdlib + click,
    and --no-plots writes the CSV/JSON without loading matplotlib."""
    import subprocess
    import sys

    trace, tables = files
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "from flowcon.sim.cli import simulate\n"
        f"r = CliRunner().invoke(simulate, ['--trace', {str(trace)!r}, '--cluster', '1x4',"
        f" '--throughputs', {str(tables)!r}, '--out', {str(tmp_path / 'o')!r}, '--no-plots'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print(sorted(m for m in ('numpy', 'matplotlib') if m in sys.modules))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert (tmp_path / "o" / "jobs.csv").exists()
    assert not (tmp_path / "o" / "cluster.png").exists()
