"""How the client commands show the allocator's answers: the one-line submit and dry-run
answers, the ``flowcon jobs`` table (``-o wide|json|name``, ``-q``), ``flowcon job``'s
description and ``flowcon logs``' lines."""

from __future__ import annotations

import datetime as _dt
import sys
from typing import Any

import click


def submit_line(out: dict[str, Any], data: dict[str, Any]) -> str:
    name = out.get("name", data.get("name"))
    if out.get("decision") == "profiling":
        return f"profiling {name}: {out.get('reason', '')} (see: flowcon jobs)"
    if out.get("decision") == "cancelled":
        return f"cancelled {name} while it was profiling"
    lost = _guarantees_given_up(out)
    if out.get("admitted"):
        return f"admitted {name}: {out.get('gpus', 0)} GPUs now ({out.get('reason', '')}){lost}"
    return f"dropped {name}: {out.get('reason', '')}{lost}"


def _guarantees_given_up(out: dict[str, Any]) -> str:
    """``; deadline guarantee given up: a, b`` (admitted jobs that fell behind and no
    plan brings to their deadline any more, ``SlotLedger.try_admit``), or nothing."""
    names = [str(n) for n in out.get("revoked") or ()]
    return f"; deadline guarantee given up: {', '.join(names)}" if names else ""


def dry_run_line(out: dict[str, Any]) -> str:
    """``would be admitted NAME: 4 GPUs now, predicted finish 13:20:01 (+9m58s), deadline
    13:30:01 (+19m58s) (reason)``; nothing was created."""
    import time

    name = out.get("name")
    if out.get("decision") == "profiling":
        return f"would profile {name}: {out.get('reason', '')} (nothing created)"
    lost = _guarantees_given_up(out)
    if not out.get("admitted"):
        return f"would be dropped {name}: {out.get('reason', '')}{lost} (nothing created)"
    now = float(out.get("now") or time.time())
    gpus = int(out.get("gpus") or 0)
    finish = out.get("predicted_finish")
    when = (
        f"predicted finish {_when(finish, now)}"
        if finish is not None
        else "waits for spare GPUs (no predicted finish)"
    )
    deadline = out.get("deadline")
    dl = f", deadline {_when(deadline, now)}" if deadline is not None else ", best effort"
    return (
        f"would be admitted {name}: {gpus} GPUs now, {when}{dl} ({out.get('reason', '')}{lost}; "
        "nothing created)"
    )


def _when(ts: Any, now: float) -> str:
    if ts is None:
        return "-"
    t = _dt.datetime.fromtimestamp(float(ts))
    delta = float(ts) - now
    rel = f"{'+' if delta >= 0 else '-'}{_human(abs(delta))}"
    return f"{t:%H:%M:%S} ({rel})"


def _human(seconds: float) -> str:
    s = int(round(seconds))
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{(s % 3600) // 60:02d}m"


_COLUMNS = ("name", "state", "GPUs", "progress", "deadline", "predicted finish", "note")

_WIDE = ("submitted", "iterations", "min-max GPUs", "placement", "image")


def _note(r: dict[str, Any]) -> str:
    met = r.get("deadline_met")
    if met is not None:
        return "met deadline" if met else "MISSED deadline"
    return str(r.get("reason") or "")


def _placement(where: Any) -> str:
    """[[node, gpu], ...] as ``node1:0,1 node2:0``."""
    by: dict[str, list[str]] = {}
    for slot in where or []:
        if isinstance(slot, list | tuple) and len(slot) == 2:
            by.setdefault(str(slot[0]), []).append(str(slot[1]))
    return " ".join(f"{n}:{','.join(g)}" for n, g in by.items()) or "-"


def _deadline_text(r: dict[str, Any], now: float) -> str:
    if not r.get("deadline"):
        return "best effort"
    soft = " (soft)" if r.get("soft_deadline") else ""
    return _when(r.get("deadline"), now) + soft


def _row(r: dict[str, Any], now: float, wide: bool) -> list[str]:
    row = [
        str(r.get("name")),
        str(r.get("state")),
        str(r.get("gpus", 0)),
        f"{100 * float(r.get('progress') or 0):.1f}%",
        _deadline_text(r, now),
        _when(r.get("predicted_finish"), now),
        _note(r),
    ]
    if wide:
        spec = r.get("spec") or {}
        hi = spec.get("max_gpus")
        row += [
            _when(r.get("submit_time"), now),
            f"{float(r.get('done_iterations') or 0):.0f}/{float(r.get('iterations') or 0):.0f}",
            f"{spec.get('min_gpus') or 1}-{hi if hi else 'any'}",
            _placement(r.get("placement")),
            str(spec.get("image", "")),
        ]
    return row


def jobs_table(rows: list[dict[str, Any]], url: str, now: float, wide: bool = False) -> Any:
    """The ``flowcon jobs`` table (rich), ``-o wide`` with more columns."""
    from rich.table import Table

    table = Table(title=f"allocator {url}")
    for col in _COLUMNS + (_WIDE if wide else ()):
        # only the free-text note wraps: a name, a time or an image stays whole
        table.add_column(
            col, justify="right" if col in ("GPUs", "progress") else "left", no_wrap=col != "note"
        )
    for r in rows:
        table.add_row(*_row(r, now, wide))
    return table


def jobs_console(wide: bool = False) -> Any:
    from rich.console import Console

    return Console(file=sys.stdout, width=max(180 if wide else 120, Console().width))


def render_jobs(rows: list[dict[str, Any]], output: str, url: str) -> Any:
    """What one listing shows: a rich table, or text for json/name/quiet."""
    import json
    import time

    if output == "json":
        return json.dumps(rows, indent=2)
    if output == "name":
        return "\n".join(f"job/{r.get('name')}" for r in rows)
    if output == "quiet":
        return "\n".join(str(r.get("name")) for r in rows)
    return jobs_table(rows, url, time.time(), wide=output == "wide")


def print_jobs(rows: list[dict[str, Any]], output: str, url: str) -> None:
    shown = render_jobs(rows, output, url)
    if isinstance(shown, str):
        if shown:
            click.echo(shown)
    else:
        jobs_console(output == "wide").print(shown)


def jobs_fingerprint(rows: list[dict[str, Any]]) -> Any:
    keys = ("name", "state", "gpus", "placement", "predicted_finish", "reason")
    return [[r.get(k) for k in keys] + [round(float(r.get("progress") or 0), 3)] for r in rows]


def _fmt_ts(ts: Any, now: float) -> str:
    return _when(ts, now) if ts is not None else "-"


def _event_detail(e: dict[str, Any]) -> str:
    skip = {"id", "ts", "kind", "job"}
    parts = []
    for k, v in e.items():
        if k in skip or v is None or v == [] or v == {}:
            continue
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def describe_job(job: dict[str, Any], now: float) -> str:
    """``flowcon job NAME``: kubectl describe-like text."""
    import yaml as _yaml

    deadline = job.get("deadline")
    finish = job.get("predicted_finish")
    kind = "soft" if job.get("soft_deadline") else "hard"
    lines = [
        f"Name:              {job.get('name')}",
        f"State:             {job.get('state')}",
        f"Reason:            {job.get('reason') or '-'}",
        f"Submitted:         {_fmt_ts(job.get('submit_time'), now)}",
        "Deadline:          "
        + (f"{_when(deadline, now)} ({kind})" if deadline else "none (best effort)"),
        f"Predicted finish:  {_fmt_ts(finish, now)}{_vs_deadline(finish, deadline)}",
    ]
    if job.get("finish_time") is not None:
        met = job.get("deadline_met")
        verdict = "" if met is None else ("  (met its deadline)" if met else "  (MISSED)")
        lines.append(f"Finished:          {_fmt_ts(job.get('finish_time'), now)}{verdict}")
    done, total = float(job.get("done_iterations") or 0), float(job.get("iterations") or 0)
    lines += [
        f"Progress:          {100 * float(job.get('progress') or 0):.1f}% "
        f"({done:.0f}/{total:.0f} iterations)",
        f"GPUs:              {job.get('gpus', 0)}",
        f"Placement:         {_placement(job.get('placement'))}",
        "Curve (it/s):      "
        + (", ".join(f"{g}: {v:.3g}" for g, v in (job.get("curve") or {}).items()) or "-"),
        "Spec:",
    ]
    shown = dict(job.get("spec") or {})
    for key in ("submit_time", "deadline"):  # Unix times, as a reader wants them
        if isinstance(shown.get(key), int | float):
            shown[key] = _iso(shown[key])
    spec_text = _yaml.safe_dump(shown, sort_keys=False, default_flow_style=None)
    lines += ["  " + ln for ln in spec_text.rstrip().splitlines()]
    lines.append("GPUs over time:")
    allocs = job.get("allocations") or []
    if not allocs:
        lines.append("  (never held GPUs)")
    for a in allocs:
        lines.append(
            f"  {_fmt_ts(a.get('ts'), now):<22} {a.get('gpus'):>4}  "
            f"{_placement(a.get('placement'))}"
        )
    lines.append("Events:")
    for e in job.get("events") or []:
        lines.append(f"  {_fmt_ts(e.get('ts'), now):<22} {e.get('kind'):<22} {_event_detail(e)}")
    return "\n".join(lines)


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(float(ts)).astimezone().isoformat(timespec="seconds")


def _vs_deadline(finish: Any, deadline: Any) -> str:
    if finish is None or deadline is None:
        return ""
    slack = float(deadline) - float(finish)
    if slack >= 0:
        return f", {_human(slack)} before the deadline"
    return f", {_human(-slack)} AFTER the deadline (at risk)"


def log_line(ln: dict[str, Any], prefix: bool, timestamps: bool) -> str:
    head = f"[rank {ln.get('rank')}] " if prefix else ""
    if timestamps:
        ns = int(ln.get("ts_ns") or 0)
        t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.UTC)
        head = f"{t:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z {head}"
    return f"{head}{ln.get('text', '')}"
