"""Replay plots rendered with Agg: titles fit, the heatmap and growth plots draw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from flowcon.replay.growth import GrowthPoint
from flowcon.replay.model import JobRecord, RunResult
from flowcon.replay.plots import (
    cpu_figure,
    growth_figure,
    heatmap_figure,
    jct_figure,
    plot_growth,
    plot_heatmap,
)


def run(policy: str, jcts: dict[str, float], scenario: str = "fixed") -> RunResult:
    r = RunResult(scenario, policy, f"id-{policy}", 0.0, 2, 0.05, 20.0)
    for i, (name, jct) in enumerate(jcts.items()):
        r.jobs.append(JobRecord(name, "img", float(i), float(i), float(i) + jct, 0))
    return r


def assert_title_inside(fig: Any) -> None:
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        title = ax.title
        if not title.get_text():
            continue
        box = title.get_window_extent(renderer)
        outer = fig.bbox
        assert box.x0 >= outer.x0 - 0.5, (box, outer)
        assert box.x1 <= outer.x1 + 0.5, (box, outer)
        assert box.y0 >= outer.y0 - 0.5, (box, outer)
        assert box.y1 <= outer.y1 + 0.5, (box, outer)


def test_jct_title_fits_with_few_jobs_and_long_names() -> None:
    import matplotlib.pyplot as plt

    # Two jobs: the narrowest figure; a long scenario name and two makespans in the title
    # (the old one-line title ran past both edges).
    jobs = {"job-one": 812.4, "job-two": 640.9}
    results = {
        "none": run("none", jobs, "random-15-held-out-mix-pinned-threads"),
        "flowcon": run("flowcon", jobs, "random-15-held-out-mix-pinned-threads"),
    }
    fig = jct_figure(results)
    try:
        assert_title_inside(fig)
        assert "makespan" in fig.axes[0].get_title()
    finally:
        plt.close(fig)


def test_cpu_and_growth_titles_fit() -> None:
    import matplotlib.pyplot as plt

    r = run("none", {"a": 10.0, "b": 12.0}, "a-rather-long-scenario-name-for-a-cpu-plot")
    r.growth = [GrowthPoint(t, "a", 10 ** (-t / 3), "NL", "dry-run") for t in range(10)]
    r.growth += [GrowthPoint(t, "b", 0.5, "WL", "dry-run") for t in range(10)]
    for fig in (cpu_figure(r), growth_figure(r)):
        try:
            assert_title_inside(fig)
        finally:
            plt.close(fig)


def test_growth_plot_lines_and_log_scale(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    r = run("flowcon", {"a": 10.0, "b": 12.0})
    r.growth = [GrowthPoint(t, "a", 10 ** (-t / 3), "NL", "updated") for t in range(10)]
    r.growth += [GrowthPoint(t, "b", 0.5, "WL", "updated") for t in range(5)]
    fig = growth_figure(r)
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"  # 1 down to 1e-3: three decades
    assert [line.get_label() for line in ax.get_lines()] == ["a", "b"]
    plt.close(fig)
    r.growth = [GrowthPoint(t, "a", 0.5 + 0.01 * t, "NL", "updated") for t in range(5)]
    fig = growth_figure(r)
    assert fig.axes[0].get_yscale() == "linear"
    plt.close(fig)
    assert plot_growth(r, tmp_path / "g.png").stat().st_size > 5000


def test_heatmap_of_a_hand_made_grid(tmp_path: Path) -> None:
    import matplotlib.pyplot as plt

    grid: dict[tuple[float, float], float | None] = {
        (0.01, 10): -12.5,
        (0.01, 20): 3.0,
        (0.05, 10): -42.1,
        (0.05, 20): None,  # a point not run
        (0.15, 60): 8.0,
    }
    fig = heatmap_figure(grid, "fixed: best job's JCT change vs none", "change (%)")
    try:
        ax = fig.axes[0]
        assert [t.get_text() for t in ax.get_xticklabels()] == ["10", "20", "60"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["1 %", "5 %", "15 %"]
        texts = [t.get_text() for t in ax.texts]
        assert texts == ["-12.5 %", "+3.0 %", "-", "-42.1 %", "-", "-", "-", "-", "+8.0 %"]
        data = ax.images[0].get_array()
        assert data[1][0] == -42.1
        assert np.ma.getmaskarray(data)[1][1]
        # symmetric colour scale around 0: green = faster, red = slower
        assert ax.images[0].get_clim() == (-42.1, 42.1)
        assert_title_inside(fig)
    finally:
        plt.close(fig)
    assert plot_heatmap(grid, tmp_path / "h.png", "t", "%").stat().st_size > 3000
