"""``flowcon agent`` (the per-host daemon) and ``flowcon status`` (its view, docker-stats-like)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import click

from flowcon.config import Config, ConfigError, load

log = logging.getLogger("flowcon.agent")


def _config(path: str | None) -> Config:
    try:
        return load(path)
    except ConfigError as exc:
        raise click.ClickException(f"config: {exc}") from None


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config.")
@click.option("--dry-run", is_flag=True, help="Log decisions; change no container.")
@click.option("--once", is_flag=True, help="Run one round and exit (limits stay applied).")
def agent(config_path: str | None, dry_run: bool, once: bool) -> None:
    """Run the FlowCon agent on this host's Docker engine."""
    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s"
        )
    from flowcon.agent.daemon import Agent

    cfg = _config(config_path)
    try:
        daemon = Agent(cfg, dry_run=dry_run)
    except PermissionError as exc:
        raise click.ClickException(f"cannot reach the engine or state file: {exc}") from None
    if once:
        daemon.run_once()
        return
    daemon.run()


def _fmt_bytes(n: Any) -> str:
    if not n:
        return "0B"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if value < 1024 or unit == "GiB":
            return f"{value:.0f}{unit}" if unit == "B" else f"{value:.1f}{unit}"
        value /= 1024
    return str(n)


def _num(x: Any, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), help="State file to read.")
@click.option("--json", "as_json", is_flag=True, help="Print the state as JSON.")
def status(config_path: str | None, state_path: str | None, as_json: bool) -> None:
    """Show the managed containers: list, G, limit, CPU, last metric."""
    from flowcon.agent.state import StateStore
    from rich.console import Console
    from rich.table import Table

    path = state_path or _config(config_path).state_file
    store = StateStore(path)
    if not store.path.exists():
        raise click.ClickException(f"no agent state at {path} (is the agent running?)")
    state = store.load()
    if as_json:
        views = [rec.view for rec in state.containers.values()]
        click.echo(json.dumps({"itval": state.itval, "containers": views}, indent=1))
        return
    age = time.time() - state.updated_at if state.updated_at else None
    title = (
        f"FlowCon on {state.node or '?'}: {state.host_cpus} CPUs, itval {state.itval:g}s, "
        f"{state.rounds} rounds, updated {_num(age, '.0f')}s ago"
    )
    table = Table(title=title, title_justify="left")
    for col in (
        "CONTAINER",
        "NAME",
        "LIST",
        "G",
        "LIMIT",
        "CPUS",
        "CPU %",
        "MEM",
        "METRIC",
        "STEP",
        "STEP/S",
    ):
        table.add_column(
            col, justify="right" if col not in ("CONTAINER", "NAME", "METRIC") else "left"
        )
    for cid, rec in sorted(state.containers.items(), key=lambda kv: kv[1].name):
        v = rec.view
        cpu = v.get("cpu_share")
        metric = f"{v.get('metric', '?')}={_num(v.get('value'), '.4g')}"
        table.add_row(
            cid[:12],
            rec.name,
            rec.list or ("job" if rec.job else "-"),
            _num(v.get("g"), ".3f"),
            _num(rec.limit if rec.managed else None, ".3f"),
            "orig" if rec.applied_cpus is None else f"{rec.applied_cpus:g}",
            _num(None if cpu is None else cpu * 100 * (state.host_cpus or 1), ".1f"),
            _fmt_bytes(v.get("mem_bytes")),
            metric,
            _num(v.get("step"), "d"),
            _num(v.get("iterations_per_second"), ".2f"),
        )
    # Piped output (no terminal): do not squeeze the table into 80 columns.
    Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200).print(table)
