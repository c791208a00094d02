"""Repeated, alternating comparisons on the engine: ``flowcon replay --compare --repeat N``
and benchmarks/bench_replay.py both run them through :func:`run_compare`.

The order, the busy-host decision and the aggregation are in flowcon.replay.repeat
(pure); this module runs the replays, measures the host's load and writes the files:

* ``--repeat 1`` with the agent's default control (today's compare): ``none/``,
  ``flowcon/``, ``compare.csv``/``compare.json`` of that pair, ``jct.png``;
* otherwise: ``rep<i>-<variant>/`` per run (``rep2-flowcon-weights/``), per repetition
  ``rep<i>-compare-<variant>.csv/json`` and ``rep<i>-jct.png``, and the aggregate
  ``compare.csv``/``compare.json`` (medians with min-max over repetitions).
"""

from __future__ import annotations

import csv
import json
import logging
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from flowcon.replay.model import RunResult
from flowcon.replay.repeat import (
    NONE,
    BusyLimits,
    RunFigures,
    aggregate,
    busy_reason,
    run_order,
    variant_control,
    variant_dir,
)
from flowcon.replay.scenario import Scenario

log = logging.getLogger(__name__)

RunPolicy = Callable[..., RunResult]  # cli.run_policy's signature


class HostBusy(RuntimeError):
    """The host is too busy for a fair comparison (and --force was not given)."""


@dataclass
class LoadCheck:
    limits: BusyLimits = field(default_factory=BusyLimits)
    window: float = 3.0
    force: bool = False
    # Seconds to wait for a busy host to quieten before refusing: the load average lags
    # a minute behind, so right after a run (of this very benchmark) it still says busy.
    settle: float = 0.0


def check_host(check: LoadCheck, sleep: Any = None) -> dict[str, Any]:
    """Measure the host; raise HostBusy when busy unless forced (after waiting up to
    ``check.settle`` s for it to quieten). Returns what to record:
    ``{"start": load, "busy": reason or None, "forced": bool}``."""
    import time

    from flowcon.replay.hostload import measure

    pause = sleep or time.sleep
    load = measure(check.window)
    reason = busy_reason(load, check.limits)
    waited = 0.0
    while reason and waited < check.settle:
        pause(10.0)
        waited += 10.0 + check.window
        load = measure(check.window)
        reason = busy_reason(load, check.limits)
    if reason and not check.force:
        raise HostBusy(
            f"the host is busy: {reason}. A comparison on a busy host is noisy; wait for "
            "it to quieten, raise --max-load/--max-busy, or pass --force (recorded)"
        )
    if reason:
        log.warning("host busy (%s); going on as --force asks", reason)
    return {"start": load.to_dict(), "busy": reason, "forced": bool(reason) and check.force}


def legacy_layout(variants: Sequence[str], repeat: int) -> bool:
    """Today's single compare: one repetition of none vs the agent's default control."""
    return repeat == 1 and list(variants) == ["flowcon"]


def run_dir_name(rep: int, key: str, legacy: bool) -> str:
    return variant_dir(key) if legacy else f"rep{rep}-{variant_dir(key)}"


@dataclass
class CompareRun:
    """One compare: what to run and how (replay_kwargs go to run_policy)."""

    scenario: Scenario
    out_dir: Path
    variants: list[str]
    repeat: int = 1
    replay_kwargs: dict[str, Any] = field(default_factory=dict)
    host: dict[str, Any] = field(default_factory=dict)  # check_host's record
    load_window: float | None = 3.0
    show_progress: bool = False


def run_compare(
    client: Any,
    spec: CompareRun,
    run_policy: RunPolicy,
    on_result: Callable[[RunResult], None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, RunResult]]]:
    """Run every repetition in alternating order; write the files; return the summary
    (the aggregate, or today's comparison for the legacy layout) and the results."""
    from flowcon.replay.plots import plot_jct
    from flowcon.replay.recorder import comparison, figures, write_comparison

    legacy = legacy_layout(spec.variants, spec.repeat)
    order = run_order(spec.variants, spec.repeat)
    all_results: list[dict[str, RunResult]] = []
    reps: list[dict[str, RunFigures]] = []
    runs: dict[str, dict[str, str]] = {}
    base_config = dict(spec.replay_kwargs.get("agent_config") or {})
    for i, policies in enumerate(order, start=1):
        results: dict[str, RunResult] = {}
        for key in policies:
            name = run_dir_name(i, key, legacy)
            kwargs = dict(spec.replay_kwargs)
            control = variant_control(key)
            if control is not None:
                kwargs["agent_config"] = {**base_config, "control": control}
            result = run_policy(
                client,
                spec.scenario,
                NONE if key == NONE else "flowcon",
                spec.out_dir / name,
                show_progress=spec.show_progress,
                load_window=spec.load_window,
                forced=bool(spec.host.get("forced")),
                **kwargs,
            )
            results[key] = result
            runs.setdefault(f"rep{i}", {})[key] = name
            if on_result is not None:
                on_result(result)
        all_results.append(results)
        reps.append({k: figures(r, runs[f"rep{i}"][k]) for k, r in results.items()})
        if legacy:
            plot_jct(results, spec.out_dir / "jct.png")
            cmp = comparison(results[NONE], results["flowcon"])
            cmp["host"] = spec.host
            write_comparison(cmp, spec.out_dir)
            return cmp, all_results
        plot_jct(results, spec.out_dir / f"rep{i}-jct.png")
        for key in spec.variants:
            cmp = comparison(results[NONE], results[key])
            write_comparison(cmp, spec.out_dir, stem=f"rep{i}-compare-{variant_dir(key)}")
    summary = {
        "scenario": spec.scenario.name,
        "alpha": spec.scenario.alpha,
        "itval": spec.scenario.itval,
        "threads": spec.scenario.threads,
        "adapt_threads": spec.scenario.adapt_threads,
        "order": order,
        "runs": runs,
        "host": spec.host,
        **aggregate(reps, spec.variants),
    }
    write_aggregate(summary, spec.out_dir)
    return summary, all_results


AGG_FIELDS = (
    "variant",
    "job",
    "repeats",
    "jct_none_median",
    "jct_median",
    "jct_change_median",
    "jct_change_min",
    "jct_change_max",
    "cpu_s_none_median",
    "cpu_s_median",
    "cpu_s_change_median",
    "cpu_s_change_min",
    "cpu_s_change_max",
)


def _num(v: Any) -> Any:
    return "" if v is None else f"{v:.4f}"


def aggregate_rows(summary: dict[str, Any]) -> list[list[Any]]:
    """compare.csv's rows: per variant its jobs, then a (makespan) and a (total) row."""
    rows: list[list[Any]] = []
    for key, v in summary["variants"].items():
        n = v["repeats"]
        for r in v["jobs"]:
            jc, cc = r["jct_change"], r["cpu_s_change"]
            rows.append(
                [key, r["job"], n, *map(_num, (r["jct_none"], r["jct"]))]
                + [_num(jc[k]) for k in ("median", "min", "max")]
                + [*map(_num, (r["cpu_s_none"], r["cpu_s"]))]
                + [_num(cc[k]) for k in ("median", "min", "max")]
            )
        mc, tc = v["makespan_change"], v["cpu_s_total_change"]
        rows.append(
            [key, "(makespan)", n, _num(v["makespan_none"]), _num(v["makespan"])]
            + [_num(mc[k]) for k in ("median", "min", "max")]
            + [_num(v["cpu_s_total_none"]), _num(v["cpu_s_total"])]
            + [_num(tc[k]) for k in ("median", "min", "max")]
        )
    return rows


def write_aggregate(summary: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"csv": out_dir / "compare.csv", "json": out_dir / "compare.json"}
    with paths["csv"].open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(AGG_FIELDS)
        w.writerows(aggregate_rows(summary))
    paths["json"].write_text(json.dumps(summary, indent=2) + "\n")
    return paths


def _pct(spread: dict[str, Any]) -> str:
    med, lo, hi = spread["median"], spread["min"], spread["max"]
    if med is None:
        return "-"
    if spread["n"] <= 1:
        return f"{100 * med:+.1f} %"
    return f"{100 * med:+.1f} % [{100 * lo:+.1f}, {100 * hi:+.1f}]"


def _s(v: float | None) -> str:
    return "-" if v is None else f"{v:.1f}"


def print_aggregate(summary: dict[str, Any]) -> None:
    """A rich table: per variant and job the medians and the change's min-max."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    title = escape(
        f"{summary['scenario']}: FlowCon (alpha={summary['alpha']:g}, "
        f"itval={summary['itval']:g}, threads {summary['threads']}) vs none, "
        f"median [min, max] of {summary['repeats']} repetition(s)"
    )
    table = Table(title=title)
    several = len(summary["variants"]) > 1
    for col in ("variant", "job", "JCT none (s)", "JCT (s)", "JCT change"):
        if col != "variant" or several:
            table.add_column(col, justify="left" if col in ("variant", "job") else "right")
    for col in ("CPU-s none", "CPU-s", "CPU-s change"):
        table.add_column(col, justify="right")
    for key, v in summary["variants"].items():
        lead = [escape(key)] if several else []  # "flowcon[quota]" is no markup tag
        for r in v["jobs"]:
            med = r["jct_change"]["median"]
            colour = "green" if med is not None and med < 0 else "red"
            table.add_row(
                *lead,
                r["job"],
                _s(r["jct_none"]),
                _s(r["jct"]),
                f"[{colour}]{escape(_pct(r['jct_change']))}[/]",
                _s(r["cpu_s_none"]),
                _s(r["cpu_s"]),
                escape(_pct(r["cpu_s_change"])),
            )
        table.add_row(  # makespan; the CPU-s columns hold the totals
            *lead,
            "(makespan)",
            _s(v["makespan_none"]),
            _s(v["makespan"]),
            escape(_pct(v["makespan_change"])),
            _s(v["cpu_s_total_none"]),
            _s(v["cpu_s_total"]),
            escape(_pct(v["cpu_s_total_change"])),
            end_section=True,
        )
    # Redirected to a file (a benchmark's log), a table at rich's default 80 columns cuts
    # job names; give it room.
    console = Console(width=None if sys.stdout.isatty() else 140)
    console.print(table)
    host = summary.get("host") or {}
    if host.get("forced"):
        console.print(f"[yellow]forced on a busy host: {escape(str(host.get('busy')))}[/]")
