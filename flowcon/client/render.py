"""How the client commands show the allocator's answers: the one-line submit and dry-run
answers, the ``flowcon jobs`` table (``-o wide|json|name``, ``-q``), ``flowcon job``'s
description and ``flowcon logs``' lines."""

from __future__ import annotations

import datetime as _dt
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING

import click

from flowcon.allocator.views import EventView, JobDetail, JobView, LogLineView, SubmitAnswer

if TYPE_CHECKING:  # rich is imported when a table is drawn (``flowcon jobs -q`` needs none)
    from rich.console import Console
    from rich.table import Table


def submit_line(out: SubmitAnswer, spec_name: str | None) -> str:
    """``admitted NAME: 4 GPUs now (reason)``, ``dropped NAME: reason``, ``profiling
    NAME: ...`` (the spec's name when the answer has none)."""
    name = spec_name if out.name is None else out.name
    if out.decision == "profiling":
        return f"profiling {name}: {out.reason} (see: flowcon jobs)"
    if out.decision == "cancelled":
        return f"cancelled {name} while it was profiling"
    lost = _guarantees_given_up(out)
    if out.admitted:
        return f"admitted {name}: {out.gpus} GPUs now ({out.reason}){lost}"
    return f"dropped {name}: {out.reason}{lost}"


def _guarantees_given_up(out: SubmitAnswer) -> str:
    """``; deadline guarantee given up: a, b`` (admitted jobs that fell behind and no
    plan brings to their deadline any more, ``SlotLedger.try_admit``), or nothing."""
    names = out.revoked
    return f"; deadline guarantee given up: {', '.join(names)}" if names else ""


def dry_run_line(out: SubmitAnswer) -> str:
    """``would be admitted NAME: 4 GPUs now, predicted finish 13:20:01 (+9m58s), deadline
    13:30:01 (+19m58s) (reason)``; nothing was created."""
    import time

    name = out.name
    if out.decision == "profiling":
        return f"would profile {name}: {out.reason} (nothing created)"
    lost = _guarantees_given_up(out) + _checked_at_start(out)
    if not out.admitted:
        return f"would be dropped {name}: {out.reason}{lost} (nothing created)"
    now = out.now or time.time()
    finish = out.predicted_finish
    when = (
        f"predicted finish {_when(finish, now)}"
        if finish is not None
        else "waits for spare GPUs (no predicted finish)"
    )
    deadline = out.deadline
    dl = f", deadline {_when(deadline, now)}" if deadline is not None else ", best effort"
    return (
        f"would be admitted {name}: {out.gpus} GPUs now, {when}{dl} ({out.reason}{lost}; "
        "nothing created)"
    )


def _checked_at_start(out: SubmitAnswer) -> str:
    """``; checked when it starts, on its node: ...``: the node-side checks the dry run
    could not make (``checked_at_start``)."""
    later = out.json.get("checked_at_start")
    if not isinstance(later, list) or not later:
        return ""
    return f"; checked when it starts, on its node: {'; '.join(str(c) for c in later)}"


def _when(ts: float | None, now: float) -> str:
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


_COLUMNS = ("name", "owner", "state", "GPUs", "progress", "deadline", "predicted finish", "note")

_WIDE = ("submitted", "iterations", "min-max GPUs", "placement", "image")


def _note(r: JobView) -> str:
    met = r.deadline_met
    if met is not None:
        return "met deadline" if met else "MISSED deadline"
    return r.reason


def _placement(where: list[list[int]]) -> str:
    """[[node, gpu], ...] as ``node1:0,1 node2:0``."""
    by: dict[str, list[str]] = {}
    for slot in where:
        if len(slot) == 2:
            by.setdefault(str(slot[0]), []).append(str(slot[1]))
    return " ".join(f"{n}:{','.join(g)}" for n, g in by.items()) or "-"


def _deadline_text(r: JobView, now: float) -> str:
    if not r.deadline:
        return "best effort"
    soft = " (soft)" if r.soft_deadline else ""
    return _when(r.deadline, now) + soft


def _row(r: JobView, now: float, wide: bool) -> list[str]:
    row = [
        r.name,
        r.owner,
        r.state,
        str(r.gpus),
        f"{100 * r.progress:.1f}%",
        _deadline_text(r, now),
        _when(r.predicted_finish, now),
        _note(r),
    ]
    if wide:
        spec = r.spec
        hi = spec.get("max_gpus")
        row += [
            _when(r.submit_time, now),
            f"{r.done_iterations:.0f}/{r.iterations:.0f}",
            f"{spec.get('min_gpus') or 1}-{hi if hi else 'any'}",
            _placement(r.placement),
            str(spec.get("image", "")),
        ]
    return row


def jobs_table(rows: list[JobView], url: str, now: float, wide: bool = False) -> Table:
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


def jobs_console(wide: bool = False) -> Console:
    from rich.console import Console

    return Console(file=sys.stdout, width=max(180 if wide else 120, Console().width))


def render_jobs(rows: list[JobView], output: str, url: str) -> str | Table:
    """What one listing shows: a rich table, or text for json/name/quiet."""
    import json
    import time

    if output == "json":
        return json.dumps([r.to_json() for r in rows], indent=2)
    if output == "name":
        return "\n".join(f"job/{r.name}" for r in rows)
    if output == "quiet":
        return "\n".join(r.name for r in rows)
    return jobs_table(rows, url, time.time(), wide=output == "wide")


def print_jobs(rows: list[JobView], output: str, url: str) -> None:
    shown = render_jobs(rows, output, url)
    if isinstance(shown, str):
        if shown:
            click.echo(shown)
    else:
        jobs_console(output == "wide").print(shown)


def jobs_fingerprint(rows: list[JobView]) -> list[tuple[object, ...]]:
    """What a ``--watch`` listing is printed again for when it changes."""
    return [
        (r.name, r.state, r.gpus, r.placement, r.predicted_finish, r.reason, round(r.progress, 3))
        for r in rows
    ]


def _fmt_ts(ts: float | None, now: float) -> str:
    return _when(ts, now) if ts is not None else "-"


def _event_detail(e: EventView) -> str:
    parts = []
    for k, v in e.data.items():
        if v is None or v == [] or v == {}:
            continue
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def describe_job(job: JobDetail, now: float) -> str:
    """``flowcon job NAME``: kubectl describe-like text."""
    import yaml as _yaml

    deadline = job.deadline
    finish = job.predicted_finish
    kind = "soft" if job.soft_deadline else "hard"
    lines = [
        f"Name:              {job.name}",
        f"State:             {job.state}",
        f"Reason:            {job.reason or '-'}",
        f"Submitted:         {_fmt_ts(job.submit_time, now)}",
        "Deadline:          "
        + (f"{_when(deadline, now)} ({kind})" if deadline else "none (best effort)"),
        f"Predicted finish:  {_fmt_ts(finish, now)}{_vs_deadline(finish, deadline)}",
    ]
    if job.finish_time is not None:
        met = job.deadline_met
        verdict = "" if met is None else ("  (met its deadline)" if met else "  (MISSED)")
        lines.append(f"Finished:          {_fmt_ts(job.finish_time, now)}{verdict}")
    lines += [
        f"Progress:          {100 * job.progress:.1f}% "
        f"({job.done_iterations:.0f}/{job.iterations:.0f} iterations)",
        f"GPUs:              {job.gpus}{_pin_text(job.pin)}",
        f"Placement:         {_placement(job.placement)}",
        "Curve (it/s):      " + (", ".join(f"{g}: {v:.3g}" for g, v in job.curve.items()) or "-"),
    ]
    for av in job.avoided:
        lines.append(
            f"Avoided:           {av.get('node')} GPU {av.get('gpu')} "
            f"({av.get('reason') or '-'}), until {_fmt_ts(_float(av.get('until')), now)}"
        )
    lines.append("Spec:")
    shown = dict(job.spec)
    for key in ("submit_time", "deadline"):  # Unix times, as a reader wants them
        if isinstance(shown.get(key), int | float):
            shown[key] = _iso(shown[key])
    spec_text = _yaml.safe_dump(shown, sort_keys=False, default_flow_style=None)
    lines += ["  " + ln for ln in spec_text.rstrip().splitlines()]
    lines.append("GPUs over time:")
    if not job.allocations:
        lines.append("  (never held GPUs)")
    for a in job.allocations:
        lines.append(f"  {_fmt_ts(a.ts, now):<22} {a.gpus:>4}  {_placement(a.placement)}")
    lines.append("Events:")
    for e in job.events:
        lines.append(f"  {_fmt_ts(e.ts, now):<22} {e.kind:<22} {_event_detail(e)}")
    return "\n".join(lines)


def _pin_text(pin: Mapping[str, object] | None) -> str:
    """``  (held at 2 by operator; moving to node2)`` for a job an operator pinned."""
    if not pin:
        return ""
    parts = []
    if pin.get("gpus"):
        parts.append(f"held at {pin['gpus']} by {pin.get('by') or 'operator'}")
    if pin.get("node"):
        parts.append(f"moving to {pin['node']}")
    return f"  ({'; '.join(parts)})" if parts else ""


def _float(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _iso(ts: float) -> str:
    return _dt.datetime.fromtimestamp(float(ts)).astimezone().isoformat(timespec="seconds")


def _vs_deadline(finish: float | None, deadline: float | None) -> str:
    if finish is None or deadline is None:
        return ""
    slack = float(deadline) - float(finish)
    if slack >= 0:
        return f", {_human(slack)} before the deadline"
    return f", {_human(-slack)} AFTER the deadline (at risk)"


def log_line(ln: LogLineView, prefix: bool, timestamps: bool) -> str:
    head = f"[rank {ln.rank}] " if prefix else ""
    if timestamps:
        ns = ln.ts_ns
        t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.UTC)
        head = f"{t:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z {head}"
    return f"{head}{ln.text}"
