"""The plain DDP script (images/ddp-example/train_ddp.py) under ``launcher: torchrun`` and
``launcher: none`` on the two-node swarm of scripts/swarm-up.sh: 1, 2 and 3 workers over
the two nodes (host networking, a master port no other live job holds), every rank trains
every epoch at the right world size, every service completes. Skips when no swarm."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flowcon.contract import LABEL_MASTER_PORT
from flowcon.executor.lifecycle import Executor
from flowcon.jobspec.spec import parse_jobspec

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.swarm_fixtures import DDP_IMAGE, swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker, pytest.mark.slow]

EPOCH_RE = re.compile(r"\[RANK(\d+)\] Epoch (\d+) \| world (\d+)")
START_RE = re.compile(r"start rank (\d+) local_rank (\d+) world (\d+) local_world (\d+)")

PLACEMENTS = {
    1: {"node2": ["0"]},
    2: {"node1": ["0"], "node2": ["0"]},
    3: {"node1": ["0", "1"], "node2": ["0"]},
}


@pytest.fixture
def ddp_executor(swarm, labeled, tmp_path: Path):
    for client in (swarm.manager, swarm.node2):
        try:
            client.images.get(DDP_IMAGE)
        except Exception:
            pytest.fail(f"{DDP_IMAGE} not on both nodes (scripts/swarm-up.sh copies it)")
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 10.0)
    yield ex
    for name in list(ex.jobs()):
        ex.remove(name, grace_s=1.0)


@pytest.mark.parametrize("launcher", ["torchrun", "none"])
@pytest.mark.parametrize("workers", [1, 2, 3])
def test_plain_ddp_script_over_two_nodes(ddp_executor, launcher, workers) -> None:
    ex: Executor = ddp_executor
    name = f"swddp{launcher[0]}{workers}"
    cmd = ["python3", "/opt/train_ddp.py", "2", "1", "--snapshot_path",
           "/flowcon/checkpoint/snapshot.pt"]  # fmt: skip
    body = {"name": name, "image": DDP_IMAGE, "command": cmd, "global_batch_size": 32}
    body |= {"iterations": 2, "best_effort": True, "profile": {1: 1.0}, "launcher": launcher}
    placement = PLACEMENTS[workers]
    ws = ex.launch(parse_jobspec(body), placement)
    assert len(ws) == (len(placement) if launcher == "torchrun" else workers)
    assert {w.node for w in ws} == set(placement)
    ports = {w.labels[LABEL_MASTER_PORT] for w in ex.backend.list_workers({"flowcon.job": name})}
    assert len(ports) == 1  # one rendezvous port for the whole job

    def done():
        state = ex.job(name)
        assert state is not None
        assert state.status != "failed", [
            (w.name, w.state, w.exit_code, ex.backend.logs(w)[-5:]) for w in state.workers
        ]
        return state if state.status == "completed" else None

    state = wait_for(done, 240, every=1)
    text = "\n".join(line for w in state.workers for line in ex.backend.logs(w))
    ranks: dict[int, list[tuple[int, int]]] = {}
    for rank, epoch, world in EPOCH_RE.findall(text):
        ranks.setdefault(int(rank), []).append((int(epoch), int(world)))
    assert sorted(ranks) == list(range(workers)), text[-2000:]
    assert all(seen == [(0, workers), (1, workers)] for seen in ranks.values()), ranks
    starts = START_RE.findall(text)
    if launcher == "none":
        assert sorted(starts) == [(str(r), "0", str(workers), "1") for r in range(workers)]
    else:
        local = sorted((lr, lw) for _, lr, _, lw in starts)
        want = sorted((str(i), str(len(g))) for g in placement.values() for i in range(len(g)))
        assert local == want
    ex.remove(name, grace_s=1.0)
