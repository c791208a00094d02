"""PNG plots of replays: CPU usage per container over time (the paper's Figures 7
and 8), per-job completion times under both policies (Figures 3-6, 9, 12), growth
efficiency per job over time (Figures 13/14) and alpha x itval heatmaps (Table 2)."""

from __future__ import annotations

import textwrap
from collections import defaultdict
from pathlib import Path
from typing import Any

from flowcon.replay.model import RunResult


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_cpu(result: RunResult, path: Path) -> Path:
    """CPU usage (percent of the host) of each container; dashed: its CPU limit."""
    plt = _pyplot()
    series: dict[str, list[tuple[float, float, float | None]]] = defaultdict(list)
    for s in result.samples:
        pct = 100.0 * s.cpu / max(1, result.host_cpus)
        limit = None if s.limit_cpus is None else 100.0 * s.limit_cpus / max(1, result.host_cpus)
        series[s.job].append((s.t, pct, limit))
    fig, ax = plt.subplots(figsize=(10, 4.5))
    order = [j.name for j in result.jobs if j.name in series]
    for i, name in enumerate(order):
        pts = series[name]
        color = f"C{i % 10}"
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=color, lw=1.2, label=name)
        lim = [(p[0], p[2]) for p in pts if p[2] is not None]
        if lim:
            ax.plot(
                [p[0] for p in lim], [min(p[1], 100.0) for p in lim], color=color, lw=0.9, ls="--"
            )
    title = f"{result.scenario}: CPU usage, policy {result.policy}"
    if result.policy == "flowcon":
        title += f" (alpha={result.alpha:g}, itval={result.itval:g}; dashed = limit)"
    ax.set_title(title)
    ax.set_xlabel("time since first submission (s)")
    ax.set_ylabel(f"CPU usage (% of {result.host_cpus} CPUs)")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    if order:
        ax.legend(loc="upper right", fontsize=8, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def jct_figure(results: dict[str, RunResult]) -> Any:
    """Grouped bars: each job's completion time under each policy; the makespans go on
    the title's second line (wrapped to the figure's width, so it is never cut off)."""
    plt = _pyplot()
    policies = list(results)
    names: list[str] = []
    for r in results.values():
        for j in r.jobs:
            if j.name not in names:
                names.append(j.name)
    width = 0.8 / max(1, len(policies))
    fig_w = max(6.0, 0.9 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(fig_w, 4.8), layout="constrained")
    for k, policy in enumerate(policies):
        jct = {j.name: j.jct for j in results[policy].jobs}
        xs = [i + (k - (len(policies) - 1) / 2) * width for i in range(len(names))]
        ys = [jct.get(n) or 0.0 for n in names]
        color = "C0" if policy == "none" else ("C3" if policy == "flowcon" else f"C{k + 1}")
        ax.bar(xs, ys, width=width, label=policy, color=color)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("job completion time (s)")
    spans = ", ".join(
        f"{p} {r.makespan:.0f} s" if r.makespan is not None else f"{p} -"
        for p, r in results.items()
    )
    scenario = next(iter(results.values())).scenario if results else ""
    ax.set_title(_wrap(f"{scenario}: completion time per job\nmakespan: {spans}", fig_w))
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return fig


def _wrap(title: str, fig_width_in: float, fontsize: float = 12.0) -> str:
    """Wrap each line of a title to what fits in the figure's width (about 0.55 em per
    character of the default font)."""
    chars = max(20, int(fig_width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, chars) for line in title.split("\n"))


def _save(fig: Any, path: Path) -> Path:
    plt = _pyplot()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_jct(results: dict[str, RunResult], path: Path) -> Path:
    """jct_figure as a PNG."""
    return _save(jct_figure(results), path)


def growth_figure(result: RunResult) -> Any:
    """G per job over time (the paper's Figures 13/14): one line per job; a log y axis
    when the values are all positive and span two decades or more."""
    plt = _pyplot()
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for p in result.growth:
        series[p.job].append((p.t, p.g))
    fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
    order = [j.name for j in result.jobs if j.name in series]
    order += sorted(n for n in series if n not in order)
    for i, name in enumerate(order):
        pts = sorted(series[name])
        ax.plot([p[0] for p in pts], [p[1] for p in pts], color=f"C{i % 10}", lw=1.2, label=name)
    values = [p.g for p in result.growth]
    if values and min(values) > 0 and max(values) / min(values) >= 100:
        ax.set_yscale("log")
    mode = "dry-run agent, no limits changed" if result.policy == "none" else "agent acting"
    title = (
        f"{result.scenario}: growth efficiency G per job, policy {result.policy}\n"
        f"({mode}; alpha={result.alpha:g}, itval={result.itval:g})"
    )
    ax.set_title(_wrap(title, 10))
    ax.set_xlabel("time since first submission (s)")
    ax.set_ylabel("growth efficiency G")
    ax.grid(alpha=0.3, which="both")
    if order:
        ax.legend(loc="upper right", fontsize=8, ncol=2)
    return fig


def plot_growth(result: RunResult, path: Path) -> Path:
    """growth_figure as a PNG."""
    return _save(growth_figure(result), path)


def heatmap_figure(
    grid: dict[tuple[float, float], float | None], title: str, value_label: str
) -> Any:
    """A (alpha x itval) heatmap of changes in percent (the paper's Table 2 / Figures
    3-6): rows alpha, columns itval; green = faster (negative), red = slower; each cell
    annotated, a missing one shown as '-'."""
    plt = _pyplot()
    alphas = sorted({a for a, _ in grid})
    itvals = sorted({i for _, i in grid})
    cells = [[grid.get((a, i)) for i in itvals] for a in alphas]
    known = [abs(v) for row in cells for v in row if v is not None]
    span = max(known) if known else 1.0
    data = [[float("nan") if v is None else v for v in row] for row in cells]
    fig, ax = plt.subplots(
        figsize=(1.3 * len(itvals) + 3, 0.7 * len(alphas) + 2.2), layout="constrained"
    )
    image = ax.imshow(data, cmap="RdYlGn_r", vmin=-span, vmax=span, aspect="auto")
    for r, row in enumerate(cells):
        for c, v in enumerate(row):
            ax.text(c, r, "-" if v is None else f"{v:+.1f} %", ha="center", va="center")
    ax.set_xticks(range(len(itvals)), [f"{i:g}" for i in itvals])
    ax.set_yticks(range(len(alphas)), [f"{100 * a:g} %" for a in alphas])
    ax.set_xlabel("itval (s)")
    ax.set_ylabel("alpha")
    ax.set_title(_wrap(title, 1.3 * len(itvals) + 3))
    fig.colorbar(image, ax=ax, label=value_label)
    return fig


def plot_heatmap(
    grid: dict[tuple[float, float], float | None], path: Path, title: str, value_label: str
) -> Path:
    """heatmap_figure as a PNG; ``grid`` maps (alpha fraction, itval s) to a change in %."""
    return _save(heatmap_figure(grid, title, value_label), path)
