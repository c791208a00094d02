"""``flowcon agent`` (the per-host daemon) and ``flowcon status`` (its view, docker-stats-like)."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Any

import click

from flowcon.agent.config import Config, ConfigError, load
from flowcon.logsetup import LogLevelError, setup_logging

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
    """Run the FlowCon agent on this host's Docker engine.

    With --once, exits 1 when the round could not run (the engine does not answer, or
    speaks no API version FlowCon knows), naming the engine and why."""
    if not logging.getLogger().handlers:  # not started through `flowcon` (its group sets up)
        try:
            setup_logging(logging.INFO)
        except LogLevelError as exc:
            raise click.UsageError(str(exc)) from None
    from flowcon.agent.daemon import Agent

    cfg = _config(config_path)
    try:
        daemon = Agent(cfg, dry_run=dry_run)
    except PermissionError as exc:
        raise click.ClickException(f"cannot reach the engine or state file: {exc}") from None
    if once:
        if not daemon.run_once():
            raise click.ClickException(f"round not run: {daemon.controller.skipped}")
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


def _control(rec: Any) -> str:
    """How the agent applies its limit (state file): quota, shares=N, cpuset=0-1, ..."""
    if rec.applied_cpus is None:
        return "orig" if rec.managed else "-"
    if (rec.applied_mode or "quota") == "quota":
        return "quota"
    out = f"shares={rec.applied_shares}"
    if rec.applied_cap is not None:
        out += f" cap={rec.applied_cap:g}"
    return out + (f" cpuset={rec.applied_cpuset}" if rec.applied_cpuset else "")


def _mem(used: Any, limit: Any) -> str:
    if used is None:
        return "-"
    return f"{_fmt_bytes(used)} / {_fmt_bytes(limit)}" if limit else _fmt_bytes(used)


def _gpu_cells(view: Any) -> tuple[str, str]:
    """GPU % (of one GPU, summed over the container's GPUs, as CPU % is of one CPU) and its
    device memory, from the agent's last round (NVML); "-" for a container on no GPU."""
    gpus = view.get("gpus") or []
    if not gpus:
        return "-", "-"
    utils = [g.get("util") for g in gpus]
    pct = "?" if any(u is None for u in utils) else f"{sum(utils) * 100:.1f}"
    where = ",".join(str(g.get("gpu")) for g in gpus)
    return f"{pct} (GPU {where})", _fmt_bytes(view.get("gpu_mem_bytes"))


@click.command()
@click.option("--config", "config_path", type=click.Path(dir_okay=False), help="YAML config.")
@click.option("--state", "state_path", type=click.Path(dir_okay=False), help="State file to read.")
@click.option("--json", "as_json", is_flag=True, help="Print the state (and live figures) as JSON.")
@click.option("--no-engine", is_flag=True, help="Do not ask the engine; the state file only.")
def status(config_path: str | None, state_path: str | None, as_json: bool, no_engine: bool) -> None:
    """Show the managed containers: list, G, limit, and live CPU %, memory like docker stats."""
    from rich.console import Console
    from rich.table import Table

    from flowcon.agent.state_file import StateStore
    from flowcon.agent.status import Live, live_figures
    from flowcon.engine.docker_engine import DockerEngine

    cfg = _config(config_path) if config_path or not state_path else None
    path = state_path or (cfg.state_file if cfg else "")
    store = StateStore(path)
    if not store.path.exists():
        raise click.ClickException(f"no agent state at {path} (is the agent running?)")
    state = store.load()
    live: dict[str, Live] = {}
    engine_error: str | None = "not asked (--no-engine)" if no_engine else None
    if not no_engine:
        engine = DockerEngine(cfg.docker_host if cfg else None, timeout=5.0, cgroup_root=None)
        try:
            live, engine_error = live_figures(engine, list(state.containers))
        finally:
            engine.close()
    age = time.time() - state.updated_at if state.updated_at else None
    if as_json:
        views = []
        for cid, rec in state.containers.items():
            one = live.get(cid)
            views.append({**rec.view, "live": one.to_dict() if one else None})
        out = {
            "itval": state.itval,
            "node": state.node,
            "host_cpus": state.host_cpus,
            "rounds": state.rounds,
            "state_age_s": age,
            "engine": {"answered": engine_error is None, "error": engine_error},
            "containers": views,
            "label_errors": [
                {"container_id": cid, **err} for cid, err in sorted(state.label_errors.items())
            ],
        }
        click.echo(json.dumps(out, indent=1))
        return
    title = (
        f"FlowCon on {state.node or '?'}: {state.host_cpus} CPUs, itval {state.itval:g}s, "
        f"{state.rounds} rounds, state updated {_num(age, '.0f')}s ago"
        + ("; CPUS, CPU % and MEM live from the engine" if engine_error is None else "")
    )
    table = Table(title=title, title_justify="left")
    for col in (
        "CONTAINER",
        "NAME",
        "LIST",
        "G",
        "LIMIT",
        "CPUS",
        "CONTROL",
        "CPU %",
        "MEM USAGE / LIMIT",
        "GPU %",
        "GPU MEM",
        "METRIC",
        "STEP",
        "STEP/S",
    ):
        table.add_column(
            col, justify="right" if col not in ("CONTAINER", "NAME", "METRIC") else "left"
        )
    for cid, rec in sorted(state.containers.items(), key=lambda kv: kv[1].name):
        v = rec.view
        metric = f"{v.get('metric', '?')}={_num(v.get('value'), '.4g')}"
        one = live.get(cid)
        if one is not None and one.error == "gone":
            cpus, cpu_pct, mem = "gone", "-", "-"
        elif one is not None:
            cpus = "none" if one.cpus_limit is None else f"{one.cpus_limit:g}"
            cpu_pct = _num(one.cpu_percent, ".1f") if one.running else "stopped"
            mem = _mem(one.mem_bytes, one.mem_limit)
        else:  # from the state file: the agent's last round
            share = v.get("cpu_share")
            cpus = "orig" if rec.applied_cpus is None else f"{rec.applied_cpus:g}"
            cpu_pct = _num(None if share is None else share * 100 * (state.host_cpus or 1), ".1f")
            mem = _fmt_bytes(v.get("mem_bytes"))
        table.add_row(
            cid[:12],
            rec.name,
            rec.list or ("job" if rec.job else "-"),
            _num(v.get("g"), ".3f"),
            _num(rec.limit if rec.managed else None, ".3f"),
            cpus,
            _control(rec),
            cpu_pct,
            mem,
            *_gpu_cells(v),
            metric,
            _num(v.get("step"), "d"),
            _num(v.get("iterations_per_second"), ".2f"),
        )
    # Piped output (no terminal): do not squeeze the table into 80 columns.
    console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 200)
    console.print(table)
    for cid, err in sorted(state.label_errors.items(), key=lambda kv: kv[1].get("name", "")):
        console.print(
            f"label error: {cid[:12]} {err.get('name', '?')}: {err.get('error', '?')} "
            "(container skipped)",
            markup=False,
            soft_wrap=True,
        )
    if engine_error is not None:
        console.print(
            f"note: engine not answering ({engine_error}); CPU %, MEM and CPUS are the "
            f"agent's figures from the state file ({_num(age, '.0f')}s old)",
            markup=False,
            soft_wrap=True,
        )
