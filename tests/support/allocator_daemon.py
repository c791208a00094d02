"""The allocator daemon with the real executor on the real engine, as the engine tests run
it: the tests' config (2 declared nodes x 4 GPUs), a daemon fixture body that cleans up
after itself, and the polls and container look-ups the tests share."""

from __future__ import annotations

import pytest

from flowcon.allocator.config import load_config
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.target import build_target
from flowcon.contract import LABEL_JOB
from support.session import TEST_LABEL, TESTBOX_IMAGE
from support.waiting import wait_for as poll

PROFILE = {1: 2.0, 2: 3.6, 4: 6.4, 8: 10.0}


def engine_config(**allocator: object) -> str:
    """The tests' daemon config: 2 declared nodes x 4 GPUs, the engine executor, a 2 s
    slot; ``allocator`` adds keys to the allocator section."""
    extra = "".join(f"  {key}: {value}\n" for key, value in allocator.items())
    return f"""\
allocator:
  listen: 127.0.0.1:0
  state_dir: state
  slot_seconds: 2
{extra}gpus:
  declared:
    nodes:
      - {{name: node1, gpus: 4}}
      - {{name: node2, gpus: 4}}
executor:
  backend: engine
  grace_s: 5
"""


CONFIG = engine_config()


def wait_for(pred, timeout=60.0, every=0.5):
    """support.waiting.wait_for with longer defaults (daemons re-plan in slots)."""
    return poll(pred, timeout, every)


def daemon_env(tmp_path, docker_client, labeled, test_run_id, config=CONFIG, image=TESTBOX_IMAGE):
    """(cfg, start, run id): ``start()`` runs a daemon with the real executor on the
    engine; every daemon is stopped and every container/network/volume of the test is
    removed afterwards (a generator: use it with ``yield from`` in a fixture)."""
    try:
        docker_client.images.get(image)
    except Exception:
        pytest.skip(f"{image} not built (images/*/build.sh)")
    (tmp_path / "allocator.yaml").write_text(config)
    cfg = load_config(tmp_path / "allocator.yaml")
    started: list[Allocator] = []

    def start() -> Allocator:
        target = build_target(cfg, client=docker_client, extra_labels=labeled())
        alloc = Allocator(cfg, target)
        alloc.start(port=0)
        started.append(alloc)
        return alloc

    try:
        yield cfg, start, test_run_id
    finally:
        for a in started:
            if a.server is not None and not a._stop.is_set():
                a.stop()
        from support.swarm_fixtures import sweep

        sweep(docker_client, f"{TEST_LABEL}={test_run_id}")


def containers(docker_client, run_id, job=None):
    labels = [f"{TEST_LABEL}={run_id}"]
    if job:
        labels.append(f"{LABEL_JOB}={job}")
    return docker_client.containers.list(ignore_removed=True, all=True, filters={"label": labels})


def env_of(c):
    return dict(e.split("=", 1) for e in c.attrs["Config"]["Env"])
