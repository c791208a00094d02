"""``flowcon submit --dry-run`` and ``flowcon logs`` against a real allocator whose engine
executor runs real containers (declared inventory 2 nodes x 4 GPUs, no GPU needed).

- a dry run creates nothing: containers, services, volumes, networks and store rows are
  counted before and after (and after two more planning slots);
- ``logs --rank N``, ``--tail`` and ``-f`` read the output (stdout and stderr) of a job's
  real worker containers; follow mode ends by itself when the job ends.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from support.allocator_daemon import daemon_env, wait_for
from support.session import TEST_LABEL

from flowcon.cli import main
from flowcon.client.http import AllocatorClient
from flowcon.contract import (
    CLI_EXIT_ADMITTED,
    CLI_EXIT_DROPPED,
    CLI_EXIT_ERROR,
    CLI_EXIT_PENDING,
    LABEL_JOB,
)
from flowcon.testing.ratejob import rate_job_spec

pytestmark = pytest.mark.docker

PROFILE = {1: 2.0, 2: 3.6, 4: 6.4, 8: 10.0}
TABLES = ("jobs", "admissions", "allocations", "events", "measurements")


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id, monkeypatch):
    for var in ("FLOWCON_ALLOCATOR_CONFIG", "FLOWCON_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id)


def cli(alloc, *args: str, input: str | None = None):
    return CliRunner().invoke(
        main, [*args, "--url", alloc.url, "--token", alloc.token], input=input
    )


def engine_objects(docker_client, rid: str) -> dict[str, int]:
    """What a job could have made on the engine: this test's containers (any state),
    volumes, networks and services (none when the engine is no swarm manager; other
    tests on a shared engine may run services of their own, so only ours count)."""
    flt = {"label": f"{TEST_LABEL}={rid}"}
    services = 0
    with contextlib.suppress(Exception):  # not a swarm manager: there are none
        services = len(docker_client.services.list(filters=flt))
    return {
        "containers": len(
            docker_client.containers.list(ignore_removed=True, all=True, filters=flt)
        ),
        "volumes": len(docker_client.volumes.list(filters=flt)),
        "networks": len(docker_client.networks.list(filters=flt)),
        "services": services,
        "all containers of the dry-run jobs": sum(
            len(
                docker_client.containers.list(
                    ignore_removed=True, all=True, filters={"label": f"{LABEL_JOB}={n}"}
                )
            )
            for n in ("dry-fits", "dry-huge", "dry-auto")
        ),
    }


def store_rows(alloc) -> dict[str, int]:
    return {t: alloc.store.count(t) for t in TABLES}


def test_dry_run_creates_nothing(env, docker_client):
    cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    # a running job, so the dry run decides next to real reservations and containers
    running = f"run{rid}"
    assert client.submit(rate_job_spec(running, 400, 300, PROFILE))["admitted"]
    wait_for(lambda: client.job(running)["state"] == "running" or None, 30)
    wait_for(lambda: engine_objects(docker_client, rid)["containers"] >= 1 or None, 30)
    time.sleep(2.5)  # a planning slot: the job's rows settle

    objects = engine_objects(docker_client, rid)
    assert objects["containers"] >= 1
    assert objects["all containers of the dry-run jobs"] == 0
    rows = store_rows(alloc)
    events_before = len(alloc.store.events())

    fits = yaml.safe_dump(rate_job_spec("dry-fits", 200, 600, PROFILE))
    out = cli(alloc, "submit", "--dry-run", "--json", "-", input=fits)
    assert out.exit_code == CLI_EXIT_ADMITTED, out.output
    answer = json.loads(out.output)
    assert answer["dry_run"]
    assert answer["gpus"] >= 1
    assert answer["predicted_finish"]
    huge = yaml.safe_dump(rate_job_spec("dry-huge", 10**6, 30, PROFILE))
    out = cli(alloc, "submit", "--dry-run", "-", input=huge)
    assert out.exit_code == CLI_EXIT_DROPPED, out.output
    auto = yaml.safe_dump({**rate_job_spec("dry-auto", 200, 600, PROFILE), "profile": "auto"})
    out = cli(alloc, "submit", "--dry-run", "-", input=auto)
    assert out.exit_code == CLI_EXIT_PENDING, out.output  # would be pre-run: not now
    assert out.output.startswith("would profile dry-auto:")

    time.sleep(2 * cfg.slot_seconds + 1)  # two planning rounds: nothing appears later
    after_objects = engine_objects(docker_client, rid)
    assert after_objects == objects
    for name in ("dry-fits", "dry-huge", "dry-auto"):
        assert alloc.store.get_job(name) is None
        assert alloc.store.admissions(name) == []
        assert alloc.store.allocations(name) == []
    # the loop's own rows (its job's measurements and events) may grow; none of ours
    new_events = alloc.store.events()[events_before:]
    assert all(e.job in (None, running) for e in new_events), new_events
    after = store_rows(alloc)
    assert after["jobs"] == rows["jobs"]
    assert after["admissions"] == rows["admissions"]
    # a real submit of the same spec then makes its containers, as the dry run said
    assert client.submit(rate_job_spec("dry-fits", 200, 600, PROFILE))["admitted"]
    wait_for(
        lambda: engine_objects(docker_client, rid)["all containers of the dry-run jobs"] or None, 30
    )
    client.cancel("dry-fits")
    client.cancel(running)


# Each worker container prints numbered lines on stdout and stderr, then waits to be
# stopped: the test cancels the job once both printed their last line, and ``logs -f``
# must then return. (A job whose containers exit one after the other is not used: a
# planning round between their exits rescales it; see the report of this branch.)
CHATTY = r"""
i=0
while [ $i -lt ${LINES_N:-12} ]; do
  i=$((i+1)); echo "rank ${GROUP_RANK} out $i"; echo "rank ${GROUP_RANK} err $i" >&2
  sleep 0.4
done
trap 'exit 143' TERM
sleep 600 & wait $!
"""


def chatty_spec(name: str, n: int) -> dict[str, Any]:
    return {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["sh", "-c", CHATTY],
        "global_batch_size": 64,
        "iterations": 1000000,
        "best_effort": True,
        "min_gpus": 8,  # 8 GPUs: both declared nodes, two containers (ranks 0 and 1)
        "launcher": "flowcon",  # one container per node (none: one per GPU)
        "profile": {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0},
        "env": {"LINES_N": str(n)},
    }


def test_logs_rank_tail_and_follow(env, docker_client):
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"chat{rid}"
    n = 12
    assert client.submit(chatty_spec(name, n))["admitted"]

    def both_talking():
        page = client.logs(name)
        texts = [ln["text"] for ln in page["lines"]]
        ok = page["ranks"] == [0, 1] and all(f"rank {r} out 3" in texts for r in (0, 1))
        return page if ok else None

    wait_for(both_talking, 60, 0.3)

    one = cli(alloc, "logs", name, "--rank", "1")
    assert one.exit_code == 0, one.output
    lines = one.output.splitlines()
    assert "rank 1 out 1" in lines
    assert "rank 1 err 1" in lines  # stdout and stderr
    assert all(ln.startswith("rank 1 ") for ln in lines), lines

    both = cli(alloc, "logs", name).output.splitlines()
    assert "[rank 0] rank 0 out 1" in both
    assert "[rank 1] rank 1 out 1" in both

    tail = cli(alloc, "logs", name, "--rank", "0", "--tail", "2", "-t").output.splitlines()
    assert len(tail) == 2
    assert all(ln[:4].isdigit() and "Z rank 0 " in ln for ln in tail)

    missing = cli(alloc, "logs", name, "--rank", "5")
    assert missing.exit_code == CLI_EXIT_ERROR
    assert "no worker of rank 5" in missing.output

    def cancel_when_done() -> None:
        last = {f"rank {r} out {n}" for r in (0, 1)}
        wait_for(lambda: last <= {ln["text"] for ln in client.logs(name)["lines"]} or None, 60)
        time.sleep(1.0)  # the follower's next pages come while the job still runs
        client.cancel(name)

    canceller = threading.Thread(target=cancel_when_done)
    canceller.start()
    t0 = time.monotonic()
    follow = cli(alloc, "logs", name, "-f", "--interval", "0.2")
    took = time.monotonic() - t0
    canceller.join()
    assert follow.exit_code == 0, follow.output
    got = follow.output.splitlines()
    # every line of both workers once, in order, though read page by page as printed
    for r in (0, 1):
        for stream in ("out", "err"):
            mine = [ln for ln in got if ln.startswith(f"[rank {r}] rank {r} {stream} ")]
            assert mine == [f"[rank {r}] rank {r} {stream} {i}" for i in range(1, n + 1)]
    assert len(got) == 4 * n, got
    assert client.job(name)["state"] == "cancelled"  # it returned because the job ended
    assert took < 60
