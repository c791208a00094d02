"""``flowcon allocator`` (the daemon) and its clients: ``submit`` (``--dry-run``, ``-``),
``jobs``, ``job``, ``logs`` and ``cancel`` (docs/jobs.md, "Commands"; exit codes in
``flowcon.contract``, ``CLI_EXIT_*``)."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from flowcon.contract import (
    CLI_EXIT_ADMITTED,
    CLI_EXIT_DROPPED,
    CLI_EXIT_ERROR,
    CLI_EXIT_INVALID,
    CLI_EXIT_PENDING,
)
from flowcon.service.config import ENV_CONFIG, ENV_TOKEN, ENV_URL, ConfigError, client_settings
from flowcon.textfile import NotText, read_text, safe_load_yaml

_config_opt = click.option(
    "--config",
    "config_path",
    type=click.Path(dir_okay=False),
    envvar=ENV_CONFIG,
    help=f"Allocator config file (env {ENV_CONFIG}).",
)
_url_opt = click.option("--url", envvar=ENV_URL, help=f"Allocator URL (env {ENV_URL}).")
_token_opt = click.option("--token", envvar=ENV_TOKEN, help=f"API token (env {ENV_TOKEN}).")


def _client(config_path: str | None, url: str | None, token: str | None) -> Any:
    from flowcon.service.client import AllocatorClient

    try:
        u, t = client_settings(config_path, url, token)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    return AllocatorClient(u, t)


def _fail(exc: Exception, what: str = "request") -> None:
    """The daemon's error as one line; a refused input (400) exits ``CLI_EXIT_INVALID``."""
    from flowcon.service.client import ClientError

    if isinstance(exc, ClientError):
        msg = str(exc)
        field = exc.body.get("field")
        if field is not None or exc.status == 400:
            raise InvalidInput(f"invalid {what}: {exc.body.get('error', msg)}")
        elif exc.status == 401:
            msg = f"{msg} (give --token, {ENV_TOKEN}, or the config with the daemon's token)"
        elif exc.status == 403:
            msg = (
                f"{msg} (submit, its dry run and cancel need the user or operator token; "
                "reads any but agent)"
            )
        raise click.ClickException(msg)
    raise exc


@click.command()
@_config_opt
@click.option("--listen", help="HOST:PORT to serve the API on (overrides the config).")
@click.option("--state-dir", type=click.Path(file_okay=False), help="Where the DB lives.")
@click.option(
    "--slot",
    type=click.FloatRange(min=0, min_open=True),
    help="Scheduling slot in seconds (overrides the config).",
)
def allocator(
    config_path: str | None, listen: str | None, state_dir: str | None, slot: float | None
) -> None:
    """Run the elastic GPU allocator daemon (ElasticFlow admission + allocation)."""
    from flowcon.service.backend import EngineConnectError
    from flowcon.service.config import check_listen, load_config
    from flowcon.service.daemon import run_daemon

    try:
        cfg = load_config(config_path)
        if listen:
            cfg.listen = check_listen(listen)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if state_dir:
        cfg.state_dir = Path(state_dir).expanduser().resolve()
    if slot:
        cfg.slot_seconds = slot
    try:
        run_daemon(cfg)
    except (ConfigError, OSError, EngineConnectError) as exc:
        raise click.ClickException(str(exc)) from None


def read_spec_file(path: Path) -> dict[str, Any]:
    """The spec as a mapping, with a profile file inlined (the daemon cannot read the
    client's files). Checked locally first so a typo fails before any network call."""
    try:
        text = read_text(path)
    except (OSError, NotText) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}") from None
    return read_spec_text(text, path.parent, str(path))


def read_spec_text(text: str, base_dir: Path, label: str) -> dict[str, Any]:
    """``read_spec_file`` for a spec's text (a file's, or standard input's with ``-``);
    a profile file is read relative to ``base_dir``."""
    from flowcon.service.jobspec import JobSpecError, load_profile, parse_jobspec

    try:
        parse_jobspec(text, base_dir=base_dir)
        data = safe_load_yaml(text)
    except JobSpecError as exc:
        raise InvalidInput(f"invalid spec {label}: {exc}") from None
    except (OSError, yaml.YAMLError) as exc:
        raise InvalidInput(f"cannot read {label}: {exc}") from None
    prof = data.get("profile")
    if isinstance(prof, str) and prof != "auto":
        data["profile"] = {g: v for g, v in load_profile(base_dir / prof).points}
    return dict(data)


class InvalidInput(click.ClickException):
    """Invalid input (spec, file, option): exit code ``CLI_EXIT_INVALID``."""

    exit_code = CLI_EXIT_INVALID


def _exit_code(out: dict[str, Any]) -> int:
    """What submit (and its dry run) exits with for the allocator's answer."""
    decision = out.get("decision")
    if decision == "profiling":
        return CLI_EXIT_PENDING
    if decision == "cancelled":
        return CLI_EXIT_ERROR
    return CLI_EXIT_ADMITTED if out.get("admitted") else CLI_EXIT_DROPPED


@click.command()
@click.argument("spec", type=click.Path(dir_okay=False, allow_dash=True, path_type=str))
@_config_opt
@_url_opt
@_token_opt
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON answer.")
@click.option(
    "--dry-run",
    is_flag=True,
    help="Validate and say whether it would be admitted now (GPUs, predicted finish); "
    "creates nothing (like sbatch --test-only).",
)
@click.option(
    "--wait/--no-wait",
    default=True,
    help="With profile: auto, wait for the pre-run and the decision (default) or return "
    "at once with 'profiling'.",
)
@click.option(
    "--timeout",
    type=float,
    default=1800.0,
    show_default=True,
    help="Give up waiting for a profiling decision after this many seconds.",
)
def submit(
    spec: str,
    config_path: str | None,
    url: str | None,
    token: str | None,
    as_json: bool,
    dry_run: bool,
    wait: bool,
    timeout: float,
) -> None:
    """Submit a job spec (a YAML file, or - for standard input); prints "admitted" with
    its GPUs or "dropped" with the reason.

    Exit codes: 0 admitted, 3 dropped, 2 invalid input, 4 still profiling (--no-wait),
    1 any other error. --dry-run exits with the same codes for "would be admitted /
    dropped" and creates nothing. A spec with ``profile: auto`` is pre-run first (1, 2,
    4, ... GPUs); the command shows each measured point and then the decision, unless
    --no-wait."""
    import json

    if spec == "-":
        data = read_spec_text(sys.stdin.read(), Path.cwd(), "<stdin>")
    else:
        path = Path(spec)
        if not path.is_file():
            raise InvalidInput(f"cannot read {spec}: no such file")
        data = read_spec_file(path)
    client = _client(config_path, url, token)
    try:
        if dry_run:
            out = client.dry_run(data)
        else:
            out = client.submit(data)
            if out.get("decision") == "profiling" and wait:
                name = str(out.get("name", data.get("name")))
                out = wait_for_decision(client, name, out, timeout)
    except Exception as exc:
        _fail(exc, "spec")
        return
    if as_json:
        click.echo(json.dumps(out, indent=2))
    else:
        click.echo(_dry_run_line(out) if dry_run else _submit_line(out, data))
    sys.exit(_exit_code(out))


def _submit_line(out: dict[str, Any], data: dict[str, Any]) -> str:
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


def _dry_run_line(out: dict[str, Any]) -> str:
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


def wait_for_decision(
    client: Any, name: str, first: dict[str, Any], timeout: float, every: float = 1.0
) -> dict[str, Any]:
    """Poll the job while its pre-run runs; print each profiled point on stderr; return an
    answer shaped like a direct submit's once the daemon decided."""
    import time

    counts = first.get("counts") or []
    click.echo(
        f"profiling {name} at {', '.join(map(str, counts))} GPUs "
        f"(up to {first.get('profile_seconds', '?')} s each)...",
        err=True,
    )
    seen: set[int] = set()
    end = time.monotonic() + timeout
    while True:
        job = client.job(name)
        for e in job.get("events", []):
            if e.get("kind") == "profile_point" and e["id"] not in seen:
                seen.add(e["id"])
                rate = e.get("iterations_per_s")
                got = "no steady rate" if rate is None else f"{rate:.3g} it/s"
                took = f"{e.get('seconds', 0):.0f} s"
                click.echo(f"  {e.get('gpus')} GPU(s): {got} (after {took})", err=True)
        if job.get("state") != "profiling":
            adm = (job.get("admissions") or [{}])[-1]
            decision = "admitted" if adm.get("admitted") else "dropped"
            if job.get("state") == "cancelled":
                decision = "cancelled"
            return {
                "name": name,
                "decision": decision,
                "admitted": bool(adm.get("admitted")),
                "reason": adm.get("reason") or job.get("reason", ""),
                "gpus": job.get("gpus", 0),
                "min_share": adm.get("min_share"),
                "profile": job.get("profile"),
                "state": job.get("state"),
            }
        if time.monotonic() > end:
            raise click.ClickException(
                f"{name} is still profiling after {timeout:.0f} s (the daemon keeps going; "
                "see flowcon jobs)"
            )
        time.sleep(every)


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


ACTIVE = ("profiling", "admitted", "running")
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


def _console(wide: bool = False) -> Any:
    from rich.console import Console

    return Console(file=sys.stdout, width=max(180 if wide else 120, Console().width))


@click.command()
@_config_opt
@_url_opt
@_token_opt
@click.option(
    "-o",
    "--output",
    type=click.Choice(["table", "wide", "json", "name"]),
    default="table",
    show_default=True,
    help="table; wide (more columns); json; name (job/NAME per line, like kubectl).",
)
@click.option("--json", "as_json", is_flag=True, help="Same as -o json.")
@click.option("-q", "--quiet", is_flag=True, help="Only the job names (like docker ps -q).")
@click.option("--all/--active", "show_all", default=True, help="Include finished jobs.")
@click.option(
    "-w",
    "--watch",
    is_flag=True,
    help="Refresh until Ctrl-C (like kubectl get -w / watch); on a terminal the table is "
    "redrawn in place, otherwise printed again whenever it changes.",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=2.0,
    show_default=True,
    help="Seconds between refreshes with --watch.",
)
@click.option(
    "--watch-count",
    type=click.IntRange(min=1),
    default=None,
    help="With --watch: stop after this many refreshes (scripts, tests).",
)
def jobs(
    config_path: str | None,
    url: str | None,
    token: str | None,
    output: str,
    as_json: bool,
    quiet: bool,
    show_all: bool,
    watch: bool,
    interval: float,
    watch_count: int | None,
) -> None:
    """List jobs: name, state, GPUs, progress, deadline, predicted finish."""
    if as_json:
        output = "json"
    if quiet:
        output = "quiet"
    client = _client(config_path, url, token)

    def fetch() -> list[dict[str, Any]]:
        try:
            rows: list[dict[str, Any]] = client.jobs()
        except Exception as exc:
            _fail(exc)
            raise  # not reached: _fail raises
        return rows if show_all else [r for r in rows if r.get("state") in ACTIVE]

    if not watch:
        _print_jobs(fetch(), output, client.url)
        return
    watch_jobs(fetch, output, client.url, interval, watch_count)


def _render_jobs(rows: list[dict[str, Any]], output: str, url: str) -> Any:
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


def _print_jobs(rows: list[dict[str, Any]], output: str, url: str) -> None:
    shown = _render_jobs(rows, output, url)
    if isinstance(shown, str):
        if shown:
            click.echo(shown)
    else:
        _console(output == "wide").print(shown)


def _fingerprint(rows: list[dict[str, Any]]) -> Any:
    keys = ("name", "state", "gpus", "placement", "predicted_finish", "reason")
    return [[r.get(k) for k in keys] + [round(float(r.get("progress") or 0), 3)] for r in rows]


def watch_jobs(
    fetch: Any, output: str, url: str, interval: float, count: int | None = None
) -> None:
    """``flowcon jobs --watch``: on a terminal a rich ``Live`` table redrawn every
    ``interval`` seconds; otherwise the listing printed again whenever it changed (a log
    a script can read). Stops after ``count`` refreshes, or at Ctrl-C."""
    import time

    console = _console(output == "wide")
    n = 0
    try:
        if console.is_terminal and output not in ("json", "name", "quiet"):
            from rich.live import Live

            with Live(_render_jobs(fetch(), output, url), console=console) as live:
                n = 1
                while count is None or n < count:
                    time.sleep(interval)
                    live.update(_render_jobs(fetch(), output, url))
                    n += 1
            return
        last: Any = None
        while count is None or n < count:
            if n:
                time.sleep(interval)
            rows = fetch()
            n += 1
            if _fingerprint(rows) != last:
                last = _fingerprint(rows)
                _print_jobs(rows, output, url)
                if output in ("json", "name", "quiet"):
                    click.echo("---")  # one listing ends (a YAML document separator)
    except KeyboardInterrupt:
        return


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


@click.command("job")
@click.argument("name")
@_config_opt
@_url_opt
@_token_opt
@click.option(
    "-o",
    "--output",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="text (like kubectl describe) or the API's JSON.",
)
def job_cmd(
    name: str, config_path: str | None, url: str | None, token: str | None, output: str
) -> None:
    """One job: its spec (env values hidden), state, GPUs and placement over time, events,
    predicted finish against its deadline."""
    import json
    import time

    client = _client(config_path, url, token)
    try:
        job = client.job(name)
    except Exception as exc:
        _fail(exc)
        return
    if output == "json":
        click.echo(json.dumps(job, indent=2))
    else:
        click.echo(describe_job(job, time.time()))


TERMINAL = ("completed", "dropped", "cancelled", "failed")
# -f asks each page from this long before the newest line it printed, and skips the lines
# it printed already: a worker's line that reached the engine's log a moment after another
# worker's newer one is still printed (a single cursor would pass over it)
FOLLOW_OVERLAP_NS = 2_000_000_000


def _log_line(ln: dict[str, Any], prefix: bool, timestamps: bool) -> str:
    head = f"[rank {ln.get('rank')}] " if prefix else ""
    if timestamps:
        ns = int(ln.get("ts_ns") or 0)
        t = _dt.datetime.fromtimestamp(ns / 1e9, tz=_dt.UTC)
        head = f"{t:%Y-%m-%dT%H:%M:%S}.{ns % 1_000_000_000:09d}Z {head}"
    return f"{head}{ln.get('text', '')}"


@click.command()
@click.argument("name")
@_config_opt
@_url_opt
@_token_opt
@click.option("-f", "--follow", is_flag=True, help="Keep printing until the job ends or Ctrl-C.")
@click.option(
    "--rank",
    type=click.IntRange(min=0),
    default=None,
    help="Only this worker container's output (its node rank, flowcon.rank; GROUP_RANK in it).",
)
@click.option("--tail", type=click.IntRange(min=0), default=None, help="Last N lines of each.")
@click.option("-t", "--timestamps", is_flag=True, help="Show the engine's timestamps.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.05),
    default=1.0,
    show_default=True,
    help="Seconds between polls with --follow.",
)
def logs(
    name: str,
    config_path: str | None,
    url: str | None,
    token: str | None,
    follow: bool,
    rank: int | None,
    tail: int | None,
    timestamps: bool,
    interval: float,
) -> None:
    """The output of a job's worker containers (Swarm: services), in time order; each line
    prefixed with its rank when the job has several workers. Logs exist while the job's
    containers do: they are removed when it ends."""
    import time

    client = _client(config_path, url, token)
    first = True
    newest = 0  # the newest line's timestamp (ns)
    seen: set[tuple[Any, ...]] = set()  # lines printed in the last FOLLOW_OVERLAP_NS
    try:
        while True:
            after = None if first else str(max(0, newest - FOLLOW_OVERLAP_NS))
            page = client.logs(name, rank=rank, after=after, tail=tail if first else None)
            ranks = page.get("ranks") or []
            if rank is not None and ranks and rank not in ranks and not follow:
                raise click.ClickException(
                    f"job {name} has no worker of rank {rank} (ranks: {', '.join(map(str, ranks))})"
                )
            prefix = rank is None and len(ranks) > 1
            for ln in page.get("lines") or []:
                key = (ln.get("rank"), ln.get("node"), ln.get("ts_ns"), ln.get("text"))
                if key in seen:
                    continue
                seen.add(key)
                newest = max(newest, int(ln.get("ts_ns") or 0))
                click.echo(_log_line(ln, prefix, timestamps))
            if page.get("note") and first:
                click.echo(page["note"], err=True)  # once, also when following
            first = False
            if not follow or page.get("state") in TERMINAL:
                return
            seen = {k for k in seen if int(k[2] or 0) > newest - FOLLOW_OVERLAP_NS}
            time.sleep(interval)
    except KeyboardInterrupt:
        return
    except click.ClickException:
        raise
    except Exception as exc:
        _fail(exc)


@click.command()
@click.argument("names", nargs=-1, required=True)
@_config_opt
@_url_opt
@_token_opt
def cancel(
    names: tuple[str, ...], config_path: str | None, url: str | None, token: str | None
) -> None:
    """Cancel jobs: their containers stop and their GPUs go to the others. Exits 1 when
    any could not be cancelled, naming them."""
    from flowcon.service.client import ClientError

    client = _client(config_path, url, token)
    failed: list[str] = []
    for name in names:
        try:
            out = client.cancel(name)
        except ClientError as exc:
            if exc.status in (0, 401, 403):  # the same for every name: say it once
                _fail(exc)
            click.echo(f"cannot cancel {name}: {exc}", err=True)
            failed.append(name)
            continue
        click.echo(f"cancelled {out.get('name', name)}")
    if failed:
        raise click.ClickException(f"not cancelled: {', '.join(failed)}")
