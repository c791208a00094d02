"""Readers for the ElasticFlow trace CSVs and the per-model throughput tables.

Every problem is reported as an InputError naming the file, row and column, so a bad
line in a 15,000-job trace is found without a debugger.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass
from pathlib import Path

from flowcon.alloc.batch import make_range
from flowcon.alloc.model import BatchRange, Job, ThroughputCurve
from flowcon.textfile import NotText, read_text

TRACE_COLUMNS = (
    "job_id",
    "submission_time",
    "num_iteration",
    "model_name",
    "deadline",
    "batch_size",
    "num_gpu",
)


class InputError(ValueError):
    def __init__(self, path: str | Path, row: int | None, column: str | None, msg: str) -> None:
        where = str(path)
        if row is not None:
            where += f", row {row}"
        if column is not None:
            where += f", column {column!r}"
        super().__init__(f"{where}: {msg}")
        self.path, self.row, self.column = str(path), row, column


# model -> global batch size -> curve
Tables = dict[str, dict[int, ThroughputCurve]]


def load_throughputs(directory: str | Path) -> Tables:
    """``DIR/<model>.csv``: header ``global_batch_size,1,2,4,...``; one row per batch size.
    Empty, ``nan`` and 0 cells mean "not measured"."""
    d = Path(directory)
    if not d.is_dir():
        raise InputError(d, None, None, "throughput directory not found")
    tables: Tables = {}
    files = sorted(d.glob("*.csv"))
    if not files:
        raise InputError(d, None, None, "no <model>.csv throughput tables in directory")
    for f in files:
        tables[f.stem] = _load_table(f)
    return tables


def _text(path: Path) -> str:
    """The file's text; not UTF-8 is an InputError naming the line."""
    try:
        return read_text(path)
    except NotText as exc:
        raise InputError(path, None, None, str(exc)) from None


def _load_table(path: Path) -> dict[int, ThroughputCurve]:
    reader = csv.reader(io.StringIO(_text(path), newline=""))
    try:
        rows = list(reader)
    except csv.Error as exc:  # a cell over the csv module's field size limit, ...
        raise InputError(path, reader.line_num, None, f"not a CSV table: {exc}") from None
    if not rows:
        raise InputError(path, None, None, "empty throughput table")
    header = [h.strip() for h in rows[0]]
    counts = _table_counts(path, header)
    out: dict[int, ThroughputCurve] = {}
    for i, row in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in row):
            continue
        if len(row) > len(header):
            raise InputError(path, i, None, f"{len(row)} cells but {len(header)} columns")
        try:
            bs = int(row[0])
        except ValueError:
            raise InputError(path, i, "global_batch_size", f"not an integer: {row[0]!r}") from None
        out[bs] = ThroughputCurve(_table_points(path, i, counts, row[1:]))
    return out


def _table_counts(path: Path, header: list[str]) -> list[int]:
    """The GPU counts of the header: ``global_batch_size,1,2,4,...``."""
    if not header or header[0] != "global_batch_size":
        raise InputError(
            path, 1, header[0] if header else None, "first column must be 'global_batch_size'"
        )
    counts: list[int] = []
    for h in header[1:]:
        try:
            n = int(h)
        except ValueError:
            raise InputError(path, 1, h, "GPU-count column header is not an integer") from None
        if n < 1:
            raise InputError(path, 1, h, "GPU count must be >= 1")
        counts.append(n)
    return counts


def _table_points(path: Path, i: int, counts: list[int], cells: list[str]) -> dict[int, float]:
    """Throughput per GPU count of row ``i``; empty, zero and NaN cells are left out."""
    pts: dict[int, float] = {}
    for n, cell in zip(counts, cells, strict=False):
        cell = cell.strip()
        if cell == "":
            continue
        try:
            v = float(cell)
        except ValueError:
            raise InputError(path, i, str(n), f"not a number: {cell!r}") from None
        if v < 0 or math.isinf(v):
            raise InputError(path, i, str(n), f"throughput must be >= 0, got {cell}")
        if math.isfinite(v) and v > 0:
            pts[n] = v
    if not pts:
        raise InputError(path, i, None, "no positive throughput in this row")
    return pts


@dataclass(frozen=True)
class TraceRow:
    job: Job
    duration: float | None


def _num(path: Path, i: int, row: dict[str, str], col: str, *, integer: bool = False) -> float:
    raw = (row.get(col) or "").strip()
    try:
        v = float(raw)
    except ValueError:
        raise InputError(path, i, col, f"not a number: {raw!r}") from None
    if not math.isfinite(v):
        raise InputError(path, i, col, f"not a finite number: {raw!r}")
    if integer and v != int(v):
        raise InputError(path, i, col, f"not an integer: {raw!r}")
    return v


def load_trace(path: str | Path, tables: Tables) -> list[Job]:
    """Rows of the ElasticFlow trace format (see shared/data/README.md). Row numbers in
    errors count the header as row 1, like a spreadsheet. An empty ``deadline`` cell makes
    a best-effort job; an optional ``soft_deadline`` column (0/1) marks soft deadlines;
    optional ``batch_size_min`` / ``batch_size_max`` columns give a batch-size range
    (flowcon.alloc.batch; the table rows inside it are the batches the job may run at).
    Jobs come back by submission time, ties in file order (the published simulator's order,
    which its first-fit baselines depend on)."""
    p = Path(path)
    if not p.is_file():
        raise InputError(p, None, None, "trace file not found")
    reader = csv.DictReader(io.StringIO(_text(p), newline=""))
    try:
        jobs = _trace_jobs(p, reader, tables)
    except csv.Error as exc:  # a cell over the csv module's field size limit, ...
        raise InputError(p, reader.reader.line_num, None, f"not a CSV table: {exc}") from None
    jobs.sort(key=lambda j: j.submit_time)  # stable: ties keep the file order
    return jobs


def _trace_jobs(p: Path, reader: csv.DictReader[str], tables: Tables) -> list[Job]:
    fields = [f.strip() for f in (reader.fieldnames or [])]
    missing = [c for c in TRACE_COLUMNS if c not in fields]
    if missing:
        raise InputError(p, 1, missing[0], "required column missing from header")
    reader.fieldnames = fields
    jobs: list[Job] = []
    seen: set[str] = set()
    for i, row in enumerate(reader, start=2):
        if None in row:
            raise InputError(p, i, None, "more cells than header columns")
        jid = (row["job_id"] or "").strip()
        if not jid:
            raise InputError(p, i, "job_id", "empty job id")
        if not jid.isprintable():
            raise InputError(p, i, "job_id", f"control characters in job id {jid!r}")
        if jid in seen:
            raise InputError(p, i, "job_id", f"duplicate job id {jid!r}")
        seen.add(jid)
        jobs.append(_trace_job(p, i, row, jid, tables))
    return jobs


def _trace_job(p: Path, i: int, row: dict[str, str], jid: str, tables: Tables) -> Job:
    submit = _num(p, i, row, "submission_time")
    iters = _num(p, i, row, "num_iteration")
    if iters <= 0:
        raise InputError(p, i, "num_iteration", "must be > 0")
    dl_raw = (row.get("deadline") or "").strip()
    deadline = None if dl_raw == "" else _num(p, i, row, "deadline")
    bs = int(_num(p, i, row, "batch_size", integer=True))
    ngpu = int(_num(p, i, row, "num_gpu", integer=True))
    if ngpu < 1:
        raise InputError(p, i, "num_gpu", "must be >= 1")
    model = (row["model_name"] or "").strip()
    if model not in tables:
        raise InputError(p, i, "model_name", f"no throughput table for model {model!r}")
    curve = tables[model].get(bs)
    if curve is None:
        raise InputError(p, i, "batch_size", f"model {model!r} has no row for batch size {bs}")
    soft = (row.get("soft_deadline") or "").strip().lower() in ("1", "true", "yes")
    dur_raw = (row.get("duration") or "").strip()
    duration = None if dur_raw == "" else _num(p, i, row, "duration")
    return Job(
        job_id=jid,
        submit_time=submit,
        iterations=iters,
        deadline=deadline,
        curve=curve,
        soft_deadline=soft,
        requested_gpus=ngpu,
        model=model,
        batch_size=bs,
        duration=duration,
        batch_range=_batch_range(p, i, row, tables[model], bs),
    )


def _batch_range(
    p: Path, i: int, row: dict[str, str], rows: dict[int, ThroughputCurve], bs: int
) -> BatchRange | None:
    """The optional ``batch_size_min`` / ``batch_size_max`` columns (either may be empty:
    the job's batch size then bounds that side); both empty: no range."""
    cells = {c: (row.get(c) or "").strip() for c in ("batch_size_min", "batch_size_max")}
    if not any(cells.values()):
        return None
    lo = int(_num(p, i, row, "batch_size_min", integer=True)) if cells["batch_size_min"] else bs
    hi = int(_num(p, i, row, "batch_size_max", integer=True)) if cells["batch_size_max"] else bs
    if lo < 1 or lo > bs:
        raise InputError(p, i, "batch_size_min", f"must be in [1, batch_size {bs}], got {lo}")
    if hi < bs:
        raise InputError(p, i, "batch_size_max", f"must be >= batch_size {bs}, got {hi}")
    return make_range(rows, lo, hi, bs)
