"""``flowcon logs`` on the two-node swarm (scripts/swarm-up.sh): a job of two services, one
per node, read through the allocator's logs route and the swarm backend's ``read_logs``
(service logs: stdout and stderr, timestamped, paged after a cursor)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from flowcon.allocator.config import load_config
from flowcon.allocator.daemon import Allocator
from flowcon.allocator.target import ExecutorTarget
from flowcon.cli import main
from flowcon.client.http import AllocatorClient

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.swarm_fixtures import swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

CHATTY = r"""
i=0
while [ $i -lt ${LINES_N:-10} ]; do
  i=$((i+1)); echo "rank ${GROUP_RANK} out $i"; echo "rank ${GROUP_RANK} err $i" >&2
  sleep 0.4
done
trap 'exit 143' TERM
sleep 600 & wait $!
"""


def test_logs_of_a_job_on_two_swarm_nodes(swarm, labeled, test_run_id, tmp_path: Path):

    (tmp_path / "a.yaml").write_text(
        "allocator: {listen: '127.0.0.1:0', state_dir: state, slot_seconds: 2}\n"
    )
    cfg = load_config(tmp_path / "a.yaml")
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 2.0, gpus_per_node=4)
    inv = ex.inventory
    alloc = Allocator(cfg, ExecutorTarget(ex, inv))
    alloc.start(port=0)
    name, n = f"slog{test_run_id}", 10
    try:
        client = AllocatorClient(alloc.url, alloc.token)
        spec = {
            "name": name,
            "image": "flowcon/testbox:latest",
            "command": ["sh", "-c", CHATTY],
            "global_batch_size": 64,
            "iterations": 1000000,
            "best_effort": True,
            "min_gpus": 8,  # both nodes: one service on each
            "launcher": "flowcon",  # one service per node (none: one per GPU)
            "profile": {1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0},
            "env": {"LINES_N": str(n)},
        }
        assert client.submit(spec)["admitted"]

        def both_talking():
            page = client.logs(name)
            texts = [ln["text"] for ln in page["lines"]]
            ok = page["ranks"] == [0, 1] and all(f"rank {r} out 2" in texts for r in (0, 1))
            return page if ok else None

        page = wait_for(both_talking, timeout=90, every=0.5)
        assert {ln["node"] for ln in page["lines"]} == {"node1", "node2"}
        run = CliRunner().invoke
        auth = ["--url", alloc.url, "--token", alloc.token]
        one = run(main, ["logs", name, "--rank", "1", *auth])
        assert one.exit_code == 0, one.output
        lines = one.output.splitlines()
        assert "rank 1 out 1" in lines
        assert "rank 1 err 1" in lines
        assert all(ln.startswith("rank 1 ") for ln in lines), lines

        def cancel_when_done() -> None:
            last = f"rank 1 out {n}"
            wait_for(lambda: last in {ln["text"] for ln in client.logs(name)["lines"]}, 60)
            time.sleep(1.0)
            client.cancel(name)

        canceller = threading.Thread(target=cancel_when_done)
        canceller.start()
        follow = run(main, ["logs", name, "-f", "--rank", "1", "--interval", "0.3", *auth])
        canceller.join()
        assert follow.exit_code == 0, follow.output
        got = follow.output.splitlines()
        assert [ln for ln in got if " out " in ln] == [f"rank 1 out {i}" for i in range(1, n + 1)]
        assert client.job(name)["state"] == "cancelled"  # follow returned: the job ended
    finally:
        alloc.stop(stop_jobs=True)
        for job in list(ex.jobs()):
            ex.remove(job, grace_s=1.0)
