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
    """cpu_figure as a PNG."""
    return _save(cpu_figure(result), path)


def cpu_figure(result: RunResult) -> Any:
    """CPU usage (percent of the host) of each container; dashed: its CPU limit."""
    plt = _pyplot()
    series: dict[str, list[tuple[float, float, float | None]]] = defaultdict(list)
    for s in result.samples:
        pct = 100.0 * s.cpu / max(1, result.host_cpus)
        limit = None if s.limit_cpus is None else 100.0 * s.limit_cpus / max(1, result.host_cpus)
        series[s.job].append((s.t, pct, limit))
    fig, ax = plt.subplots(figsize=(10, 4.5), layout="constrained")
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
    _fit_title(fig, ax, title)
    ax.set_xlabel("time since first submission (s)")
    ax.set_ylabel(f"CPU usage (% of {result.host_cpus} CPUs)")
    ax.set_ylim(0, 105)
    ax.grid(alpha=0.3)
    if order:
        ax.legend(loc="upper right", fontsize=8, ncol=2)
    return fig


JctCell = tuple[float | None, float | None, float | None]  # (median, min, max)


def jct_figure(results: dict[str, RunResult]) -> Any:
    """Grouped bars: each job's completion time under each policy; the makespans go on
    the title's second line (wrapped to the figure's width, so it is never cut off)."""
    names: list[str] = []
    for r in results.values():
        for j in r.jobs:
            if j.name not in names:
                names.append(j.name)
    series: dict[str, dict[str, JctCell]] = {
        policy: {j.name: (j.jct, j.jct, j.jct) for j in r.jobs if j.jct is not None}
        for policy, r in results.items()
    }
    spans = {policy: r.makespan for policy, r in results.items()}
    scenario = next(iter(results.values())).scenario if results else ""
    return jct_bars_figure(scenario, names, series, spans)


def jct_bars_figure(
    scenario: str,
    names: list[str],
    series: dict[str, dict[str, JctCell]],
    spans: dict[str, float | None],
) -> Any:
    """Grouped bars of per-job JCT per label (policy or variant); an error bar spans the
    min-max of repeated runs. Makespans (medians) on the title's second line."""
    plt = _pyplot()
    width = 0.8 / max(1, len(series))
    fig_w = max(6.0, 0.9 * len(names) + 2)
    fig, ax = plt.subplots(figsize=(fig_w, 4.8), layout="constrained")
    for k, (label, cells) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i in range(len(names))]
        bars = [_bar(cells.get(n)) for n in names]
        ys = [b[0] for b in bars]
        lo = [b[0] - b[1] for b in bars]
        hi = [b[2] - b[0] for b in bars]
        color = "C0" if label == "none" else ("C3" if label == "flowcon" else f"C{k + 1}")
        errs = [lo, hi] if any(lo) or any(hi) else None
        ax.bar(xs, ys, width=width, label=label, color=color, yerr=errs, capsize=3)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("job completion time (s)")
    text = ", ".join(f"{p} {v:.0f} s" if v is not None else f"{p} -" for p, v in spans.items())
    _fit_title(fig, ax, f"{scenario}: completion time per job\nmakespan: {text}")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    return fig


def _bar(cell: JctCell | None) -> tuple[float, float, float]:
    """(height, low, high) of one bar; an unknown JCT is a zero-height bar."""
    if cell is None or cell[0] is None:
        return 0.0, 0.0, 0.0
    med = cell[0]
    low = med if cell[1] is None else min(cell[1], med)
    high = med if cell[2] is None else max(cell[2], med)
    return med, low, high


def _fit_title(fig: Any, ax: Any, title: str) -> None:
    """Set the axes' title, re-wrapped narrower until its drawn box lies inside the
    figure (a title is centred on the axes, so a long one ran past the figure's edges)."""
    lines = title.split("\n")
    width = max(len(line) for line in lines)
    ax.set_title(title)
    while width > 16:
        fig.canvas.draw()
        box = ax.title.get_window_extent()
        if box.x0 >= fig.bbox.x0 and box.x1 <= fig.bbox.x1:
            return
        width = int(width * 0.85)
        ax.set_title("\n".join(textwrap.fill(line, width) for line in lines))


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
    _fit_title(fig, ax, title)
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
    _fit_title(fig, ax, title)
    fig.colorbar(image, ax=ax, label=value_label)
    return fig


def plot_heatmap(
    grid: dict[tuple[float, float], float | None], path: Path, title: str, value_label: str
) -> Path:
    """heatmap_figure as a PNG; ``grid`` maps (alpha fraction, itval s) to a change in %."""
    return _save(heatmap_figure(grid, title, value_label), path)
