"""The trace loader's optional batch-size range columns."""

from __future__ import annotations

from pathlib import Path

import pytest

from flowcon.alloc.model import Job
from flowcon.sim.loaders import InputError, load_throughputs, load_trace

HEADER = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu"


def _load(tmp_path: Path, extra_header: str, rows: str) -> list[Job]:
    tables = tmp_path / "tp"
    tables.mkdir(exist_ok=True)
    (tables / "m.csv").write_text("global_batch_size,1,2\n32,4.0,7.0\n64,2.5,4.5\n128,1.5,2.8\n")
    trace = tmp_path / "t.csv"
    trace.write_text(HEADER + extra_header + "\n" + rows)
    return load_trace(trace, load_throughputs(tables))


def test_range_columns(tmp_path: Path) -> None:
    jobs = _load(
        tmp_path, ",batch_size_min,batch_size_max", "a,0,10,m,,64,1,32,128\nb,0,10,m,,64,1,,\n"
    )
    a, b = jobs
    assert a.batch_range.batches == (32, 64, 128)  # type: ignore[union-attr]
    assert a.batch_range.submitted == 64  # type: ignore[union-attr]
    assert b.batch_range is None


def test_one_side_defaults_to_the_batch(tmp_path: Path) -> None:
    (a,) = _load(tmp_path, ",batch_size_max", "a,0,10,m,,64,1,128\n")
    assert a.batch_range.batches == (64, 128)  # type: ignore[union-attr]


def test_no_range_columns(tmp_path: Path) -> None:
    (a,) = _load(tmp_path, "", "a,0,10,m,,64,1\n")
    assert a.batch_range is None


@pytest.mark.parametrize(
    ("cells", "column"),
    [("x,128", "batch_size_min"), ("128,256", "batch_size_min"), ("32,48.5", "batch_size_max"),
     ("32,32", "batch_size_max")],
)  # fmt: skip
def test_bad_range_names_the_column(tmp_path: Path, cells: str, column: str) -> None:
    with pytest.raises(InputError) as exc:
        _load(tmp_path, ",batch_size_min,batch_size_max", f"a,0,10,m,,64,1,{cells}\n")
    assert exc.value.column == column
    assert exc.value.row == 2
