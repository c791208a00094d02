"""A restart-mode job's process group forms under the job's rendezvous secret (real torch,
two processes, gloo): with the secret both ranks join and reduce; a rank with another
secret, or a store squatting the port without the proof, is refused before it sends
anything of the job's."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from flowcon.testing.ports import free_port

pytest.importorskip("torch")

REPO = Path(__file__).resolve().parents[2]
SECRET = "5e" * 32

WORKER = textwrap.dedent(
    """
    import torch, torch.distributed as dist
    from flowcon.elastic.rendezvous import RendezvousRefused
    from flowcon.elastic.restart import Elastic
    run = Elastic(install_signal_handlers=False, timeout_s=float(__import__("sys").argv[1]))
    try:
        run.setup()
    except RendezvousRefused as exc:
        print("REFUSED", exc, flush=True)
        raise SystemExit(3)
    t = torch.ones(1) * (run.rank + 1)
    dist.all_reduce(t)
    print("SUM", int(t.item()), flush=True)
    run.close()
    """
)


def _rank(rank: int, port: int, secret: str, timeout_s: float) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "RANK": str(rank),
        "WORLD_SIZE": "2",
        "LOCAL_WORLD_SIZE": "1",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "FLOWCON_RENDEZVOUS_SECRET": secret,
    }
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, str(timeout_s)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _out(p: subprocess.Popen[str], timeout: float) -> str:
    try:
        return p.communicate(timeout=timeout)[0]
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()


def test_both_ranks_with_the_secret_form_the_group() -> None:
    port = free_port()
    ranks = [_rank(0, port, SECRET, 60), _rank(1, port, SECRET, 60)]
    outs = [_out(p, 120) for p in ranks]
    assert all("SUM 3" in o for o in outs), outs


def test_a_rank_with_another_secret_is_refused() -> None:
    port = free_port()
    host = _rank(0, port, SECRET, 60)
    try:
        intruder = _rank(1, port, "a7" * 32, 5)
        out = _out(intruder, 90)
        assert intruder.returncode == 3, out
        assert "did not prove the job's rendezvous secret" in out
    finally:
        host.kill()
        host.wait()


def test_a_store_squatting_the_port_without_the_proof_is_refused() -> None:
    import datetime as dt

    import torch.distributed as dist

    port = free_port()
    tcp_store = getattr(dist, "TCPStore")  # noqa: B009 (not in torch's typed exports)
    squat = tcp_store("127.0.0.1", port, is_master=True, wait_for_workers=False,
                          timeout=dt.timedelta(seconds=30))  # fmt: skip
    rank1 = _rank(1, port, SECRET, 5)
    out = _out(rank1, 90)
    assert rank1.returncode == 3, out
    assert "REFUSED" in out
    del squat
