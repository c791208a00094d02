"""``flowcon replay``: run a scenario on the local engine under a policy, or both."""

from __future__ import annotations

import importlib
import logging
import shlex
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import yaml

from flowcon.interrupts import raise_interrupt
from flowcon.replay.compare import CompareRun
from flowcon.replay.model import RunResult
from flowcon.replay.repeat import CONTROL_MODES, BusyLimits, variants_for
from flowcon.replay.scenario import THREAD_MODES, Scenario, ScenarioError, load_scenario

log = logging.getLogger(__name__)

SCENARIO_DIR = Path(__file__).resolve().parent.parent.parent / "scenarios"


def resolve_scenario(arg: str) -> Path:
    """A path, or a name of a file in the repository's scenarios/ folder."""
    p = Path(arg)
    if p.exists() or p.suffix in (".yaml", ".yml"):
        return p
    for cand in (SCENARIO_DIR / f"{arg}.yaml", SCENARIO_DIR / f"{arg}.yml"):
        if cand.exists():
            return cand
    return p


def _fmt(v: float | None, unit: str = "") -> str:
    return "-" if v is None else f"{v:.1f}{unit}"


class _RichProgress:
    """One row per job: state, last step and loss; the bar fills when it ends."""

    def __init__(self, result_jobs: list[Any], policy: str, enabled: bool) -> None:
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.enabled = enabled
        self.progress = Progress(
            TextColumn("[bold]{task.fields[policy]}[/]"),
            TextColumn("{task.description}", justify="left"),
            BarColumn(bar_width=20),
            TimeElapsedColumn(),
            disable=not enabled,
            transient=False,
        )
        self.policy = policy
        self.tasks: dict[str, Any] = {}
        self.records: dict[str, Any] = {}
        self.names = [j.name for j in result_jobs]

    def __enter__(self) -> _RichProgress:
        self.progress.__enter__()
        for name in self.names:
            self.tasks[name] = self.progress.add_task(
                f"{name}: pending", total=1, policy=self.policy, start=False
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(None, None, None)

    def __call__(self, event: str, job: Any, now: float) -> None:
        if job is not None:
            self.records[job.name] = job
            task = self.tasks.get(job.name)
            if task is None:
                return
            if event == "started":
                self.progress.start_task(task)
            if event == "finished":
                status = "done" if job.ok else f"FAILED ({job.error})"
                self.progress.update(
                    task,
                    completed=1,
                    description=f"{job.name}: {status}, JCT {_fmt(job.jct, ' s')}",
                )
                self.progress.stop_task(task)
            return
        for name, rec in self.records.items():
            if rec.finished is None and rec.submitted is not None:
                loss = "" if rec.final_loss is None else f" loss {rec.final_loss:.4g}"
                step = "" if rec.steps is None else f" step {rec.steps}"
                self.progress.update(self.tasks[name], description=f"{name}: running{step}{loss}")


def run_policy(
    client: Any,
    scenario: Scenario,
    policy: str,
    out_dir: Path,
    *,
    show_progress: bool,
    load_window: float | None = None,
    forced: bool = False,
    **kwargs: Any,
) -> RunResult:
    """One replay; with ``load_window`` the host's load is measured before and after
    (recorded in result.json's ``host_load``, with ``forced`` for a forced compare)."""
    from flowcon.replay.hostload import measure
    from flowcon.replay.model import JobRecord
    from flowcon.replay.plots import plot_cpu
    from flowcon.replay.recorder import write_run
    from flowcon.replay.runner import Replay

    before = measure(load_window).to_dict() if load_window else None
    jobs = [JobRecord(j.name, j.image, j.start) for j in scenario.jobs]
    with _RichProgress(jobs, policy, show_progress) as progress:
        replay = Replay(client, scenario, policy, out_dir, progress=progress, **kwargs)
        result = replay.run()
    if load_window:
        result.host_load = {
            "before": before,
            "after": measure(load_window).to_dict(),
            "forced": forced,
        }
    write_run(result, out_dir)
    plot_cpu(result, out_dir / "cpu.png")
    if result.growth:
        from flowcon.replay.plots import plot_growth

        plot_growth(result, out_dir / "growth.png")
    return result


def print_run(result: RunResult) -> None:
    from rich.console import Console
    from rich.table import Table

    policy = result.policy + (f"[{result.control}]" if result.control else "")
    table = Table(title=f"{result.scenario} under policy {policy} (run {result.run_id})")
    for col in ("job", "submit (s)", "finish (s)", "JCT (s)", "steps", "final loss", "status"):
        table.add_column(col, justify="left" if col in ("job", "status") else "right")
    for j in result.jobs:
        table.add_row(
            j.name,
            _fmt(j.submitted),
            _fmt(j.finished),
            _fmt(j.jct),
            "-" if j.steps is None else str(j.steps),
            "-" if j.final_loss is None else f"{j.final_loss:.4g}",
            "ok" if j.ok else (j.error or "?"),
        )
    console = Console()
    console.print(table)
    console.print(f"makespan: {_fmt(result.makespan, ' s')}")
    if result.policy == "flowcon":
        console.print(f"agent changed limits: {'yes' if result.limits_changed() else 'no'}")
    for err in result.errors:
        console.print(f"[red]{err}[/]")


def print_comparison(cmp: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    title = f"{cmp['scenario']}: FlowCon (alpha={cmp['alpha']:g}, itval={cmp['itval']:g}) vs none"
    table = Table(title=title)
    table.add_column("job")
    table.add_column("JCT none (s)", justify="right")
    table.add_column("JCT flowcon (s)", justify="right")
    table.add_column("change", justify="right")
    for r in cmp["jobs"]:
        ch = r["change_pct"]
        colour = "green" if ch is not None and ch < 0 else "red"
        table.add_row(
            r["job"],
            _fmt(r["jct_none"]),
            _fmt(r["jct_flowcon"]),
            "-" if ch is None else f"[{colour}]{ch:+.1f} %[/]",
        )
    console = Console()
    console.print(table)
    ch = cmp["makespan_change_pct"]
    console.print(
        f"makespan none: {_fmt(cmp['makespan_none'], ' s')}   "
        f"flowcon: {_fmt(cmp['makespan_flowcon'], ' s')}   "
        f"change: {'-' if ch is None else f'{ch:+.1f} %'}"
    )
    used_none, used_flow = cmp.get("mean_cpus_none"), cmp.get("mean_cpus_flowcon")
    console.print(
        f"CPUs used on average over the makespan: none {_fmt(used_none)}, flowcon {_fmt(used_flow)}"
    )
    if cmp.get("foreign_managed_max"):
        console.print(
            f"[yellow]warning: up to {cmp['foreign_managed_max']} other FlowCon-enabled "
            "container(s) ran meanwhile; the agent shared the host with them[/]"
        )


def _pairs(values: Sequence[str], option: str) -> list[tuple[str, str]]:
    """``KEY=VALUE`` options as (key, value); a malformed one is a usage error."""
    out = []
    for item in values:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise click.BadParameter(f"{item!r}: expected KEY=VALUE", param_hint=option)
        out.append((key.strip(), value))
    return out


def parse_agent_sets(values: Sequence[str]) -> dict[str, Any]:
    """``--agent-set KEY=VALUE`` options (values read as YAML scalars); a malformed one is
    a usage error (``click.BadParameter``). Also used by benchmarks/bench_replay.py."""
    return {key: yaml.safe_load(raw) for key, raw in _pairs(values, "--agent-set")}


def _parse_labels(values: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in _pairs(values, "--label"):
        if key.startswith(("flowcon.replay", "flowcon.enable", "flowcon.job")):
            raise click.BadParameter(f"{key!r} is set by the replay itself", param_hint="--label")
        out[key] = value
    return out


# `flowcon replay` is a group whose default command is `run`: `flowcon replay fixed
# --compare` routes to `run`. Subcommands, imported when invoked ("module:attribute");
# registering one is one line here.
REPLAY_SUBCOMMANDS: dict[str, str] = {
    "run": "flowcon.replay.cli:run",
    "generate": "flowcon.replay.generate:generate",
    "report": "flowcon.replay.htmlreport:report",
}
DEFAULT_SUBCOMMAND = "run"


class DefaultGroup(click.Group):
    """A group that hands any first argument that is not one of its subcommands (a
    scenario, an option) to DEFAULT_SUBCOMMAND. A scenario file named like a
    subcommand is reached as `flowcon replay run generate`."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(REPLAY_SUBCOMMANDS)

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        target = REPLAY_SUBCOMMANDS.get(cmd_name)
        if target is None:
            return None
        module_name, attr = target.split(":")
        cmd = getattr(importlib.import_module(module_name), attr)
        assert isinstance(cmd, click.Command)
        return cmd

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in REPLAY_SUBCOMMANDS and args[0] not in ctx.help_option_names:
            args = [DEFAULT_SUBCOMMAND, *args]
        return super().parse_args(ctx, args)


@click.group(cls=DefaultGroup)
def replay() -> None:
    """Replay scenarios on the local Docker engine (`flowcon replay SCENARIO ...` runs
    one; see `flowcon replay run --help`), or generate new ones."""


@dataclass
class _LoadOptions:
    limits: BusyLimits
    window: float
    force: bool


def _load(
    scenario: str,
    scale: tuple[float, int | None, float],
    alpha: float | None,
    itval: float | None,
    threads: str | None,
    adapt_threads: bool | None,
) -> Scenario:
    from dataclasses import replace

    try:
        sc = load_scenario(resolve_scenario(scenario))
    except ScenarioError as exc:
        raise click.ClickException(str(exc)) from None
    sc = sc.scaled(*scale)
    if alpha is not None:
        sc = replace(sc, alpha=alpha)
    if itval is not None:
        sc = replace(sc, itval=itval)
    if threads is not None:
        sc = replace(sc, threads=threads)
    if adapt_threads is not None:
        sc = replace(sc, adapt_threads=adapt_threads)
    return sc


def _check_options(policy: str, compare: bool, repeat: int, controls: tuple[str, ...]) -> None:
    if repeat > 1 and not compare:
        raise click.BadParameter(
            "repeats are for comparisons: add --compare", param_hint="--repeat"
        )
    if controls and not compare and policy != "flowcon":
        raise click.BadParameter(
            "a control mode needs the agent: --policy flowcon or --compare",
            param_hint="--control",
        )


def _connect() -> Any:
    import docker

    try:
        client = docker.from_env(version="auto", timeout=120)
        client.ping()
    except Exception as exc:
        raise click.ClickException(f"no Docker engine answers: {exc}") from None
    return client


def _single_runs(
    client: Any, sc: Scenario, policy: str, controls: tuple[str, ...], out_dir: Path, **kw: Any
) -> dict[str, RunResult]:
    """Without --compare: one run, or one per control mode (subfolders flowcon-MODE)."""
    from flowcon.replay.repeat import variant_control, variant_dir

    keys = variants_for(controls) if policy == "flowcon" else ["none"]
    results: dict[str, RunResult] = {}
    base = dict(kw.get("agent_config") or {})
    for key in keys:
        control = variant_control(key)
        if control is not None:
            kw["agent_config"] = {**base, "control": control}
        run_dir = out_dir / variant_dir(key) if len(keys) > 1 else out_dir
        results[key] = run_policy(client, sc, policy, run_dir, **kw)
        print_run(results[key])
    return results


@click.command()
@click.argument("scenario")
@click.option(
    "--policy",
    type=click.Choice(["flowcon", "none"]),
    default="flowcon",
    show_default=True,
    help="flowcon: run the agent during the replay; none: plain Docker sharing.",
)
@click.option("--compare", is_flag=True, help="Run policy none and flowcon; compare JCTs.")
@click.option(
    "--repeat",
    type=click.IntRange(min=1),
    default=1,
    show_default=True,
    help="With --compare: repetitions, in alternating order (none, flowcon, flowcon, none...).",
)
@click.option(
    "--control",
    "controls",
    multiple=True,
    type=click.Choice(CONTROL_MODES),
    help="The agent's control mode (config key `control`); repeat the option to compare "
    "several, each as a variant flowcon[MODE].",
)
@click.option(
    "--threads",
    type=click.Choice(THREAD_MODES),
    help="quota: the images' default thread pools; pinned: FLOWCON_THREADS = host CPUs "
    "(overrides the scenario's `threads`).",
)
@click.option(
    "--adapt-threads/--no-adapt-threads",
    default=None,
    help="--no-adapt-threads sets FLOWCON_ADAPT_THREADS=0 in every job "
    "(overrides the scenario's `adapt_threads`).",
)
@click.option("--force", is_flag=True, help="Compare even on a busy host (the summary records it).")
@click.option(
    "--max-load",
    type=click.FloatRange(0, min_open=True),
    default=0.5,
    show_default=True,
    help="A compare refuses to start above this 1-minute load average per CPU.",
)
@click.option(
    "--max-busy",
    type=click.FloatRange(0, 1, min_open=True),
    default=0.25,
    show_default=True,
    help="A compare refuses to start when the CPUs are busier than this fraction.",
)
@click.option(
    "--load-window",
    type=click.FloatRange(0.1, 60),
    default=3.0,
    show_default=True,
    help="Seconds over which the CPU busy fraction is measured (before/after each run).",
)
@click.option(
    "--out", "out", type=click.Path(file_okay=False, path_type=Path), help="Output folder."
)
@click.option(
    "--time-scale",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply every job's start time (0.1 = ten times denser schedule).",
)
@click.option("--iterations", type=click.IntRange(min=1), help="Override every job's iterations.")
@click.option(
    "--work-scale",
    type=click.FloatRange(0, min_open=True),
    default=1.0,
    show_default=True,
    help="Multiply every job's iterations (training images: their default).",
)
@click.option("--alpha", type=click.FloatRange(0, 1, min_open=True), help="Override alpha.")
@click.option("--itval", type=click.FloatRange(0, min_open=True), help="Override itval (s).")
@click.option(
    "--agent-set",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra key for the agent's config file (repeatable), e.g. beta=2.",
)
@click.option(
    "--agent-command",
    help="Command that starts the agent (default: this Python's `flowcon agent`); "
    "--config FILE is appended.",
)
@click.option(
    "--sample-interval",
    type=click.FloatRange(0.2, 10),
    default=1.0,
    show_default=True,
    help="Seconds between CPU samples.",
)
@click.option(
    "--timeout", type=click.FloatRange(min=1), default=7200, show_default=True, help="Per run (s)."
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="KEY=VALUE",
    help="Extra label on every container (repeatable), e.g. for your own cleanup.",
)
@click.option("-q", "--quiet", is_flag=True, help="No progress bar.")
def run(
    scenario: str,
    policy: str,
    compare: bool,
    repeat: int,
    controls: tuple[str, ...],
    threads: str | None,
    adapt_threads: bool | None,
    force: bool,
    max_load: float,
    max_busy: float,
    load_window: float,
    out: Path | None,
    time_scale: float,
    iterations: int | None,
    work_scale: float,
    alpha: float | None,
    itval: float | None,
    agent_set: tuple[str, ...],
    agent_command: str | None,
    sample_interval: float,
    timeout: float,
    labels: tuple[str, ...],
    quiet: bool,
) -> None:
    """Replay SCENARIO (a YAML file, or a name in scenarios/ such as `fixed`) on the local
    Docker engine and record completion times, makespan and CPU timelines."""
    from flowcon.replay.runner import ReplayError

    _check_options(policy, compare, repeat, controls)
    sc = _load(scenario, (time_scale, iterations, work_scale), alpha, itval, threads, adapt_threads)
    kwargs: dict[str, Any] = {
        "sample_interval": sample_interval,
        "timeout": timeout,
        "agent_command": shlex.split(agent_command) if agent_command else None,
        "agent_config": parse_agent_sets(agent_set),
        "labels": _parse_labels(labels),
    }
    _require_agent(compare or policy == "flowcon", agent_command)
    out_dir = out or Path("runs") / "replay" / f"{sc.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    load = _LoadOptions(BusyLimits(max_load, max_busy), load_window, force)
    host = _host_record(load) if compare else {}
    client = _connect()
    show = not quiet and sys.stderr.isatty()
    previous = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        if compare:
            spec = CompareRun(sc, out_dir, variants_for(controls), repeat, kwargs, host)
            spec.load_window, spec.show_progress = load_window, show
            failed = _compare(client, spec)
        else:
            kwargs.update(show_progress=show, load_window=load_window)
            results = _single_runs(client, sc, policy, controls, out_dir, **kwargs)
            failed = any(not j.ok for r in results.values() for j in r.jobs)
    except KeyboardInterrupt:
        click.echo(
            "interrupted: the agent was stopped and the replay's containers removed", err=True
        )
        sys.exit(130)
    except ReplayError as exc:
        raise click.ClickException(str(exc)) from None
    finally:
        signal.signal(signal.SIGTERM, previous)
    click.echo(f"results in {out_dir}")
    if failed:
        sys.exit(1)


def _require_agent(needed: bool, agent_command: str | None) -> None:
    from flowcon.replay.runner import agent_available

    if needed and agent_command is None and not agent_available():
        raise click.ClickException(
            "the FlowCon agent is not installed (`flowcon agent` is missing); "
            "run with --policy none, or give --agent-command"
        )


def _host_record(load: _LoadOptions) -> dict[str, Any]:
    """The busy-host check before a compare (a ClickException when busy, unless forced)."""
    from flowcon.replay.compare import HostBusy, LoadCheck, check_host

    try:
        return check_host(LoadCheck(load.limits, load.window, load.force))
    except HostBusy as exc:
        raise click.ClickException(str(exc)) from None


def _compare(client: Any, spec: CompareRun) -> bool:
    """Run the repetitions, print the summary; True if a job failed."""
    from flowcon.replay.compare import print_aggregate, run_compare

    summary, results = run_compare(client, spec, run_policy, on_result=print_run)
    if "variants" in summary:
        print_aggregate(summary)
    else:
        print_comparison(summary)
    return any(not j.ok for rep in results for r in rep.values() for j in r.jobs)
