"""Closing a generation's group never deadlocks (real torch, two processes, gloo).

A CI run hung rank 0 of a 2 -> 1 scale-in in ``ElasticDDP.rebuild``: the old DDP's
reducer was the last holder of the destroyed group, so gloo's destructor ran with the GIL
held and joined a worker thread that waited for the GIL to free the vote's tensors.
``close_group`` keeps the group's Python object until the reducer is gone. With the old
order (destroy, then drop the DDP) these workers hung within 100 generations in every one
of 5 tries here; each generation is what a switch does: DDP steps, the vote's all_gather of
temporary tensors, then the close.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from flowcon.testing.ports import free_port

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
GENERATIONS = 100

WORKER = textwrap.dedent(
    """
    import datetime, sys
    import torch, torch.distributed as dist
    from flowcon.elastic.ddp import ElasticDDP, _Comm, close_group

    rank, port, generations = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(1)
    store = dist.TCPStore("127.0.0.1", port, 2, rank == 0, timeout=datetime.timedelta(seconds=30))
    wrapped = ElasticDDP(torch.nn.Linear(8, 8), _Comm())
    for g in range(generations):
        dist.init_process_group(
            "gloo", store=dist.PrefixStore(f"g{g}/", store), rank=rank, world_size=2,
            timeout=datetime.timedelta(seconds=20),
        )
        wrapped.rebuild(2, None)
        for _ in range(3):
            wrapped(torch.randn(4, 8)).sum().backward()
            mine = torch.full((10,), float(rank), dtype=torch.float64)
            rows = [torch.zeros(10, dtype=torch.float64) for _ in range(2)]
            dist.all_gather(rows, mine)
            assert [r[0].item() for r in rows] == [0.0, 1.0]
            del mine, rows  # the worker thread may hold the last reference
        close_group(wrapped)
    print("generations", generations, flush=True)
    """
)


def test_closing_a_generation_never_deadlocks(tmp_path: Path) -> None:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    port = free_port()
    env = {"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(rank), str(port), str(GENERATIONS)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for rank in (0, 1)
    ]
    deadline = time.monotonic() + 90
    try:
        while any(p.poll() is None for p in procs) and time.monotonic() < deadline:
            time.sleep(0.1)
        hung = [rank for rank, p in enumerate(procs) if p.poll() is None]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    outs = [p.communicate()[0].decode(errors="replace") for p in procs]
    assert not hung, f"ranks {hung} hung closing a group:\n" + "\n".join(o[-1500:] for o in outs)
    for rank, (p, out) in enumerate(zip(procs, outs, strict=True)):
        assert p.returncode == 0, (rank, out[-2000:])
        assert f"generations {GENERATIONS}" in out, (rank, out[-2000:])
