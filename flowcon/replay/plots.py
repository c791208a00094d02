"""PNG plots of replays: CPU usage per container over time (the paper's Figures 7
and 8) and per-job completion times under both policies (Figures 3-6, 9, 12)."""

from __future__ import annotations

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


def plot_jct(results: dict[str, RunResult], path: Path) -> Path:
    """Grouped bars: each job's completion time under each policy, makespans in the title."""
    plt = _pyplot()
    policies = list(results)
    names: list[str] = []
    for r in results.values():
        for j in r.jobs:
            if j.name not in names:
                names.append(j.name)
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(names) + 2), 4.5))
    for k, policy in enumerate(policies):
        jct = {j.name: j.jct for j in results[policy].jobs}
        xs = [i + (k - (len(policies) - 1) / 2) * width for i in range(len(names))]
        ys = [jct.get(n) or 0.0 for n in names]
        ax.bar(xs, ys, width=width, label=policy, color="C0" if policy == "none" else "C3")
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("job completion time (s)")
    spans = ", ".join(
        f"{p}: {r.makespan:.0f} s" if r.makespan is not None else f"{p}: -"
        for p, r in results.items()
    )
    scenario = next(iter(results.values())).scenario if results else ""
    ax.set_title(f"{scenario}: completion time per job (makespan {spans})")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
