"""flowcon.report on the real engine: a training image's torch pool follows
`docker update --cpus` while it runs, as its metric lines' "threads" field shows."""

from __future__ import annotations

import json
import subprocess
import time
from typing import Any

import pytest

from flowcon.engine import images as img

MODEL = "gru"  # the cheapest steps of the training images


def _lines(container: Any) -> list[dict[str, Any]]:
    out = container.logs(stdout=True, stderr=False).decode()
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _wait_threads(container: Any, after: int, want: int, timeout: float = 60) -> int:
    """Index of the first line past ``after`` whose "threads" is ``want``."""
    deadline = time.monotonic() + timeout
    seen: list[object] = []
    while time.monotonic() < deadline:
        container.reload()
        rows = _lines(container)
        seen = [r.get("threads") for r in rows[after:]]
        if want in seen:
            return after + seen.index(want)
        assert container.status == "running", container.logs().decode()[-2000:]
        time.sleep(0.5)
    raise AssertionError(f"no line with threads={want} within {timeout} s; saw {seen[-20:]}")


def _update_cpus(cid: str, cpus: str) -> None:
    subprocess.run(["docker", "update", "--cpus", cpus, cid], check=True, capture_output=True)


@pytest.mark.docker
def test_thread_pool_follows_docker_update(docker_client, labeled, cleanup_containers) -> None:
    import docker.errors

    try:
        docker_client.images.get(img.BASE_IMAGE)
    except docker.errors.ImageNotFound:
        pytest.skip(f"{img.BASE_IMAGE} not built yet (images/base/build.sh)")
    if docker_client.info().get("NCPU", 1) < 2:
        pytest.skip("needs 2 CPUs")
    tag = img.ensure_images(docker_client, [MODEL])[0].tag  # this checkout's report.py
    container = docker_client.containers.run(
        tag,
        detach=True,
        labels=labeled(),
        network_mode="none",
        nano_cpus=2_000_000_000,
        environment={"FLOWCON_ITERATIONS": "1000000", "FLOWCON_SEQ_LEN": "20"},
    )
    first = _wait_threads(container, 0, 2)
    assert "(adapting to the CPU limit)" in container.logs(stdout=False, stderr=True).decode()

    _update_cpus(container.id, "0.5")
    at = len(_lines(container))
    lowered = _wait_threads(container, at, 1)
    rows = _lines(container)
    # Rechecked every ~2 s: the pool follows within a few seconds of steps, not at once.
    assert rows[lowered]["ts"] - rows[at]["ts"] < 10

    _update_cpus(container.id, "2")
    _wait_threads(container, len(rows), 2)

    rows = _lines(container)
    assert all(isinstance(r["threads"], int) for r in rows[first:])
    assert [r["step"] for r in rows] == list(range(1, len(rows) + 1))
