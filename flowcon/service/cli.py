"""``flowcon allocator`` (the daemon) and its clients ``submit``, ``jobs`` and ``cancel``."""

from __future__ import annotations

import datetime as _dt
import sys
from pathlib import Path
from typing import Any

import click
import yaml

from flowcon.service.config import ENV_CONFIG, ENV_TOKEN, ENV_URL, ConfigError, client_settings

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


def _fail(exc: Exception) -> None:
    from flowcon.service.client import ClientError

    if isinstance(exc, ClientError):
        msg = str(exc)
        field = exc.body.get("field")
        if field:
            msg = f"invalid spec: {exc.body.get('error', msg)}"
        elif exc.status == 401:
            msg = f"{msg} (give --token, {ENV_TOKEN}, or the config with the daemon's token)"
        elif exc.status == 403:
            msg = f"{msg} (submit and cancel need the user or operator token; reads any but agent)"
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
    from flowcon.service.jobspec import JobSpecError, load_jobspec, load_profile

    try:
        load_jobspec(path)
        data = yaml.safe_load(path.read_text())
    except JobSpecError as exc:
        msg = f"invalid spec {path}: {exc}"
        raise click.ClickException(msg) from None
    except (OSError, yaml.YAMLError) as exc:
        raise click.ClickException(f"cannot read {path}: {exc}") from None
    prof = data.get("profile")
    if isinstance(prof, str) and prof != "auto":
        data["profile"] = {g: v for g, v in load_profile(path.parent / prof).points}
    return dict(data)


@click.command()
@click.argument("spec", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@_config_opt
@_url_opt
@_token_opt
@click.option("--json", "as_json", is_flag=True, help="Print the daemon's JSON answer.")
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
    spec: Path,
    config_path: str | None,
    url: str | None,
    token: str | None,
    as_json: bool,
    wait: bool,
    timeout: float,
) -> None:
    """Submit a job spec; prints "admitted" with its GPUs or "dropped" with the reason.

    A spec with ``profile: auto`` is pre-run first (1, 2, 4, ... GPUs); the command shows
    each measured point and then the decision, unless --no-wait."""
    import json

    data = read_spec_file(spec)
    client = _client(config_path, url, token)
    try:
        out = client.submit(data)
        if out.get("decision") == "profiling" and wait:
            out = wait_for_decision(client, str(out.get("name", data.get("name"))), out, timeout)
    except Exception as exc:
        _fail(exc)
        return
    if as_json:
        click.echo(json.dumps(out, indent=2))
        return
    name = out.get("name", data.get("name"))
    if out.get("decision") == "profiling":
        click.echo(f"profiling {name}: {out.get('reason', '')} (see: flowcon jobs)")
    elif out.get("decision") == "cancelled":
        click.echo(f"cancelled {name} while it was profiling")
    elif out.get("admitted"):
        click.echo(f"admitted {name}: {out.get('gpus', 0)} GPUs now ({out.get('reason', '')})")
    else:
        click.echo(f"dropped {name}: {out.get('reason', '')}")


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


@click.command()
@_config_opt
@_url_opt
@_token_opt
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--all/--active", "show_all", default=True, help="Include finished jobs.")
def jobs(
    config_path: str | None, url: str | None, token: str | None, as_json: bool, show_all: bool
) -> None:
    """List jobs: name, state, GPUs, progress, deadline, predicted finish."""
    import json
    import time

    from rich.console import Console
    from rich.table import Table

    client = _client(config_path, url, token)
    try:
        rows = client.jobs()
    except Exception as exc:
        _fail(exc)
        return
    if not show_all:
        rows = [r for r in rows if r.get("state") in ("profiling", "admitted", "running")]
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    now = time.time()
    table = Table(title=f"allocator {client.url}")
    for col in ("name", "state", "GPUs", "progress", "deadline", "predicted finish", "note"):
        table.add_column(col, justify="right" if col in ("GPUs", "progress") else "left")
    for r in rows:
        met = r.get("deadline_met")
        note = r.get("reason") or ""
        if met is not None:
            note = "met deadline" if met else "MISSED deadline"
        table.add_row(
            str(r.get("name")),
            str(r.get("state")),
            str(r.get("gpus", 0)),
            f"{100 * float(r.get('progress') or 0):.1f}%",
            _when(r.get("deadline"), now) if r.get("deadline") else "best effort",
            _when(r.get("predicted_finish"), now),
            note,
        )
    Console(file=sys.stdout, width=max(120, Console().width)).print(table)


@click.command()
@click.argument("name")
@_config_opt
@_url_opt
@_token_opt
def cancel(name: str, config_path: str | None, url: str | None, token: str | None) -> None:
    """Cancel a job: its containers stop and its GPUs go to the others."""
    client = _client(config_path, url, token)
    try:
        out = client.cancel(name)
    except Exception as exc:
        _fail(exc)
        return
    click.echo(f"cancelled {out.get('name', name)}")
