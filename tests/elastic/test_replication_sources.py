"""Stop-free replication sends from the holders nearest the joiners (Elan section IV)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

from flowcon.elastic.replication import nearest_sources, worker_location
from flowcon.testing.ports import free_port

REPO = Path(__file__).resolve().parents[2]


def test_worker_location_from_the_container_env() -> None:
    env = {"FLOWCON_NODE": "node2", "FLOWCON_GPUS": "GPU-a,GPU-b"}
    assert worker_location(env) == ("node2", "GPU-a,GPU-b")
    assert worker_location({"FLOWCON_GPUS": "GPU-a"}) is None


def test_a_holder_on_the_joiners_node_sends() -> None:
    where = [("a", "0"), ("b", "0"), ("c", "0"), ("b", "1")]  # rank 3 joins on node b
    assert nearest_sources(where, holders=3, count=1) == [1]


def test_the_holders_nearest_most_joiners_send() -> None:
    # holders on a, b, c; joiners two on c, one on b
    where = [("a", "0"), ("b", "0"), ("c", "0"), ("c", "1"), ("c", "2"), ("b", "3")]
    assert nearest_sources(where, holders=3, count=2) == [1, 2]
    assert nearest_sources(where, holders=3, count=1) == [2]


def test_the_joiners_own_container_beats_its_node() -> None:
    # rank 1 shares the joiner's container (same GPUs string), rank 0 only its node
    where = [("a", "0"), ("a", "1,2"), ("a", "1,2")]
    assert nearest_sources(where, holders=2, count=1) == [1]


def test_unknown_places_keep_the_rank_order() -> None:
    assert nearest_sources([None, None, None, None], holders=3, count=2) == [0, 1]
    assert nearest_sources([None, ("b", "0"), ("b", "1")], holders=2, count=1) == [1]
    assert nearest_sources([("a", "0"), ("a", "1")], holders=2, count=1) == [0]  # no joiner
    assert nearest_sources([("a", "0")], holders=1, count=5) == [0]


def test_replicate_sends_from_the_near_holder(tmp_path: Path) -> None:
    """Three gloo ranks: holders on nodes a and b with different tensors, a joiner on b:
    the joiner gets rank 1's tensors (the skeleton still comes from rank 0)."""
    script = tmp_path / "rep.py"
    script.write_text(SCRIPT)
    port = free_port()
    procs = []
    for rank, node in enumerate(("a", "b", "b")):
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO),
            "OMP_NUM_THREADS": "1",
            "CUDA_VISIBLE_DEVICES": "",
            "FLOWCON_NODE": node,
            "FLOWCON_GPUS": str(rank),
        }
        procs.append(
            subprocess.Popen(
                [sys.executable, str(script), str(rank), str(port), str(tmp_path)], env=env
            )
        )
    assert [p.wait(180) for p in procs] == [0, 0, 0]
    assert (tmp_path / "got-2").read_text() == "1.0 7"


SCRIPT = """
import sys, datetime, torch, torch.distributed as dist
from flowcon.elastic.replication import replicate
rank, port, out = int(sys.argv[1]), sys.argv[2], sys.argv[3]
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=3, timeout=datetime.timedelta(seconds=60))
mine = {"model": {"w": torch.full((4,), float(rank))}, "optimizer": {}, "step": 7}
got = replicate(mine if rank < 2 else None, holders=2, sources=1)
open(f"{out}/got-{rank}", "w").write(f"{got['model']['w'][0].item()} {got['step']}")
dist.destroy_process_group()
"""
