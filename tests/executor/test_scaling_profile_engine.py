"""Profiling by scaling on the real engine: the elastic-example job (stop-free runtime,
real torch) is measured at 2 and 1 GPUs by scaling it while it runs, as itself: no
profile containers, no restart, and the steps it made while measured are kept."""

from __future__ import annotations

from typing import Any

import pytest

from flowcon.executor.lifecycle import Executor
from flowcon.executor.scaling_profile import grow_placement

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.swarm_fixtures import step_job_spec, step_metrics  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)

EXAMPLE = "flowcon/elastic-example:latest"
FREE = [("node1", ["0", "1", "2", "3"]), ("node2", ["0", "1", "2", "3"])]


@pytest.mark.docker
@pytest.mark.slow
def test_stopfree_job_is_profiled_by_scaling_without_a_restart(
    executor: Executor, docker_client
) -> None:
    try:
        docker_client.images.get(EXAMPLE)
    except Exception:
        pytest.skip(f"{EXAMPLE} not built (images/elastic-example/build.sh)")
    spec = step_job_spec(
        "sfprof",
        image=EXAMPLE,
        command=["python3", "/opt/train.py"],
        global_batch_size=32,
        env={"STEP_SLEEP": "0.05", "OMP_NUM_THREADS": "1"},
    )
    points: list[tuple[int, float | None]] = []

    def placement_for(n: int, current: dict[str, list[str]] | None) -> dict[str, list[str]] | None:
        return grow_placement(current or {}, FREE, n)

    profile = executor.profile_by_scaling(
        spec,
        [1, 2],
        placement_for,
        max_seconds=120,
        min_points=4,
        on_point=lambda n, r: points.append((n, r)),
    )
    # the largest count fitted at once: measured first, then one scale-in (EDL's order)
    assert [n for n, _ in points] == [2, 1]
    rates = dict(profile.points)
    assert set(rates) == {1, 2}
    assert all(r > 0 for r in rates.values())
    # the job runs on as itself at the last count: one container, never a profile job
    found = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": "flowcon.job=sfprof"}
    )
    assert [c.status for c in found] == ["running"]
    assert found[0].attrs["RestartCount"] == 0
    profiles = docker_client.containers.list(
        ignore_removed=True, all=True, filters={"label": "flowcon.role=profile"}
    )
    assert [c.name for c in profiles if "sfprof" in c.name] == []
    lines: list[dict[str, Any]] = step_metrics(executor, "sfprof")
    steps = [m["step"] for m in lines]
    assert steps == sorted(steps), steps
    assert len(set(steps)) == len(steps), steps  # no step ran twice: nothing restarted
    worlds = [m.get("world_size") for m in lines]
    assert worlds[0] == 2
    assert worlds[-1] == 1
