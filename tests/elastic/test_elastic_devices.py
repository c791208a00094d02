"""flowcon.elastic on GPUs: the backend rule, tensors kept on their device through the
state replication, the CUDA generator of the worker's own device. The rules run on CPU
(fakes for CUDA); the CUDA paths themselves are skipped without a GPU, saying so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402

from flowcon.elastic import devices, replication, state  # noqa: E402
from flowcon.testing.ports import free_port  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
NO_CUDA = "needs a CUDA GPU (benchmarks/gpu_check.py runs these paths on one)"


@pytest.mark.parametrize(
    ("ids", "nccl", "want"),
    [
        (["GPU-a", "GPU-b"], True, "nccl"),  # each rank its own GPU
        (["GPU-a", "GPU-a"], True, "gloo"),  # two ranks on one GPU: NCCL refuses that
        (["GPU-a", "cpu"], True, "gloo"),  # one rank on the CPU
        (["cpu", "cpu"], True, "gloo"),
        (["GPU-a", "GPU-b"], False, "gloo"),  # torch built without NCCL
        ([], True, "gloo"),
    ],
)
def test_nccl_only_when_every_rank_has_its_own_gpu(ids: list[str], nccl: bool, want: str) -> None:
    assert devices.backend_for(ids, nccl=nccl) == want


def test_restart_mode_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    gpu = torch.device("cuda", 0)
    assert devices.restart_backend(gpu, local_world_size=2, visible_gpus=2) == "nccl"
    assert devices.restart_backend(gpu, local_world_size=3, visible_gpus=2) == "gloo"
    assert devices.restart_backend(torch.device("cpu"), 1, 0) == "gloo"
    assert devices.identity(torch.device("cpu")) == "cpu"


def test_flatten_keeps_each_tensor_on_its_device() -> None:
    """A tensor off the host (the meta device stands in for a GPU here) is packed into a
    buffer on its device, never copied to the host; host tensors go to host buffers."""
    obj = {
        "w": torch.empty(2, 3, device="meta"),
        "step": torch.tensor(5.0),
        "m": [torch.empty(4, device="meta", dtype=torch.float16)],
    }
    buffers: dict[str, list[Any]] = {}
    sizes: dict[str, int] = {}
    skel = replication.flatten(obj, buffers, sizes)
    assert sizes == {"float32@gpu": 6, "float32": 1, "float16@gpu": 4}
    assert all(t.device.type == "meta" for k in ("float32@gpu", "float16@gpu") for t in buffers[k])
    assert buffers["float32"][0].device.type == "cpu"
    flat = {k: torch.cat(v) for k, v in buffers.items()}
    back = replication.unflatten(skel, flat)
    assert back["w"].shape == (2, 3)
    assert back["w"].device.type == "meta"
    assert back["step"].item() == 5.0
    assert replication.buffer_dtype("float16@gpu") is torch.float16


def _replicate(tmp_path: Path, device: str) -> str:
    script = tmp_path / "rep.py"
    script.write_text(REPLICATE_SCRIPT)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    if device == "cpu":
        env["CUDA_VISIBLE_DEVICES"] = ""
    procs = [
        subprocess.Popen(
            [sys.executable, str(script), str(r), str(port), str(tmp_path), device], env=env
        )
        for r in (0, 1)
    ]
    codes = [p.wait(180) for p in procs]
    assert codes == [0, 0]
    return (tmp_path / "ok-1").read_text()


def test_replicate_between_two_gloo_processes(tmp_path: Path) -> None:
    """Rank 0's model, optimizer and step reach rank 1, host tensors on the host."""
    assert _replicate(tmp_path, "cpu") == "same"


@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.device_count() < 2,
    reason="needs two CUDA GPUs (NCCL between two ranks, each on its own)",
)
def test_replicate_gpu_to_gpu_over_nccl(tmp_path: Path) -> None:
    """Each rank on its own GPU: the model arrives on the joiner's GPU over the NCCL group;
    the optimizer's step counts stay host tensors."""
    assert _replicate(tmp_path, "cuda") == "same"


REPLICATE_SCRIPT = """
import sys, datetime, torch, torch.distributed as dist
from flowcon.elastic.replication import replicate
from flowcon.elastic.state import capture
rank, port, out, kind = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
dev = torch.device("cuda", rank) if kind == "cuda" else torch.device("cpu")
if kind == "cuda":
    torch.cuda.set_device(dev)
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                        world_size=2, timeout=datetime.timedelta(seconds=60))
group = dist.new_group(backend="nccl") if kind == "cuda" else None
def trained(seed):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 2).to(dev)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(3, 4, device=dev)).sum().backward()
    opt.step()
    return model, opt
model, opt = trained(rank)  # different models: only replication makes them equal
mine = capture(model, opt, step=7) if rank == 0 else None
got = replicate(mine, holders=1, sources=1, device=dev, group=group)
model0, _ = trained(0)
on_dev = all(v.device == dev for v in got["model"].values())
same = all(torch.equal(a, b) for a, b in zip(got["model"].values(), model0.state_dict().values()))
steps = [v["step"] for v in got["optimizer"]["state"].values()]
ok = same and on_dev and got["step"] == 7
ok = ok and all(s.device.type == "cpu" and s.item() == 1 for s in steps)
open(f"{out}/ok-{rank}", "w").write("same" if ok else "differs")
dist.destroy_process_group()
"""


class FakeCuda:
    """torch.cuda as seen by a worker on GPU ``current`` of ``count``."""

    def __init__(self, current: int, count: int = 2) -> None:
        self.current = current
        self.count = count
        self.states = {i: torch.tensor([i], dtype=torch.uint8) for i in range(count)}
        self.set_all: list[Any] = []

    def install(self, mp: pytest.MonkeyPatch) -> None:
        c = torch.cuda
        mp.setattr(c, "is_available", lambda: True)
        mp.setattr(c, "is_initialized", lambda: True)
        mp.setattr(c, "current_device", lambda: self.current)
        mp.setattr(c, "device_count", lambda: self.count)
        mp.setattr(c, "get_rng_state", lambda i="cuda": self.states[int(i)].clone())
        mp.setattr(c, "set_rng_state", lambda s, i="cuda": self.states.__setitem__(int(i), s))
        mp.setattr(c, "set_rng_state_all", lambda ss: self.set_all.append(list(ss)))


def test_cuda_generator_of_the_own_device_follows_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    """Saved on GPU 1, restored on GPU 0 (a restart gave the rank another index): GPU 0's
    generator continues GPU 1's stream; the other GPUs are not touched."""
    before = FakeCuda(current=1)
    before.install(monkeypatch)
    saved = state.rng_state()
    assert saved["cuda_device"] == 1
    assert [int(t[0]) for t in saved["cuda"]] == [1]
    after = FakeCuda(current=0, count=4)
    after.install(monkeypatch)
    after.states[1] = torch.tensor([99], dtype=torch.uint8)
    state.set_rng_state(saved)
    assert int(after.states[0][0]) == 1  # the rank's stream, on its device now
    assert int(after.states[1][0]) == 99
    assert after.set_all == []


def test_an_older_state_restores_every_device(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeCuda(current=0, count=2)
    fake.install(monkeypatch)
    old = {"cuda": [torch.tensor([5], dtype=torch.uint8)] * 3}
    state.set_rng_state(old)
    assert len(fake.set_all[0]) == 2  # as many as both sides have


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NO_CUDA)
def test_cuda_snapshot_stays_on_the_device_and_rng_resumes_exactly() -> None:
    dev = torch.device("cuda", 0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Dropout(0.5)).to(dev)
    opt = torch.optim.Adam(model.parameters())
    model(torch.randn(4, 8, device=dev)).sum().backward()
    opt.step()
    snap = state.capture(model, opt, step=1)
    assert all(t.device == dev for t in snap["model"].values())
    want = torch.randn(16, device=dev)
    state.restore(snap, model, opt)
    assert torch.equal(torch.randn(16, device=dev), want)
    buffers: dict[str, list[Any]] = {}
    sizes: dict[str, int] = {}
    replication.flatten({"m": snap["model"]}, buffers, sizes)
    assert all(t.is_cuda for t in buffers["float32@gpu"])
