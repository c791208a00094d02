"""A checkpoint-restart resumes *exactly* (model, optimizer, step, LR
scheduler, random generators, data position): stopping at step k and resuming, in fresh
objects or a fresh process, ends with the same parameters as an uninterrupted run."""

from __future__ import annotations

import os
import random
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from flowcon import elastic  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
ITERS, STOP_AT = 12, 5

# A training script using the helper as a user would: dropout (torch generator), a python
# random draw per step, a StepLR schedule, momentum, and the elastic sampler over 40 samples
# with a global batch of 8 (the run crosses epoch boundaries).
SCRIPT = """
import os, random
import torch
from flowcon import elastic
from flowcon.elastic.data import ElasticSampler

def train(run):
    torch.set_num_threads(1)
    torch.manual_seed(0)  # identical initial weights on every rank and in every run
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(40, 4, generator=g), torch.randn(40, 1, generator=g)
    net = torch.nn.Sequential(
        torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Dropout(0.3), torch.nn.Linear(16, 1)
    )
    model = run.wrap(net)
    torch.manual_seed(100 + run.rank)  # per-rank dropout masks
    random.seed(200 + run.rank)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.7)
    sampler = ElasticSampler(40, seed=3)
    stop_at = int(os.environ.get("STOP_AT", "0"))
    for step in run.steps(
        model, opt, int(os.environ["ITERS"]), scheduler=sched, sampler=sampler
    ):
        idx = torch.tensor(sampler.batch(8, run.rank, run.world_size))
        weight = 1.0 + 0.1 * random.random()
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx]) * weight
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        sampler.advance(8)
        if step == stop_at:
            run.stop_requested = True  # what SIGTERM does
    if run.is_main and os.environ.get("OUT"):
        torch.save(net.state_dict(), os.environ["OUT"])

if __name__ == "__main__":
    elastic.main(train)
"""


@pytest.fixture
def script(tmp_path: Path) -> Path:
    path = tmp_path / "train_exact.py"
    path.write_text(SCRIPT)
    return path


def _in_process(script: Path, ckpt: Path, out: Path, stop_at: int = 0) -> elastic.Elastic:
    train: Any = runpy.run_path(str(script), run_name="exact_resume")["train"]
    env = elastic.ElasticEnv(checkpoint_dir=ckpt, iterations=ITERS, global_batch_size=8)
    run = elastic.Elastic(env, checkpoint_every=1000, install_signal_handlers=False)
    saved = dict(os.environ)
    os.environ.update(ITERS=str(ITERS), STOP_AT=str(stop_at), OUT=str(out))
    try:
        train(run)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return run


def _equal(a: Path, b: Path) -> None:
    sa, sb = torch.load(a), torch.load(b)
    assert sa.keys() == sb.keys()
    for key in sa:
        assert torch.equal(sa[key], sb[key]), key


def _reference(script: Path, tmp_path: Path) -> Path:
    out = tmp_path / "full.pt"
    run = _in_process(script, tmp_path / "ck-full", out)
    assert run.finished
    assert run.step == ITERS
    return out


def _stopped(script: Path, tmp_path: Path) -> Path:
    ckpt = tmp_path / "ck-split"
    run = _in_process(script, ckpt, tmp_path / "part1.pt", stop_at=STOP_AT)
    assert run.preempted
    assert run.step == STOP_AT
    state = elastic.load_checkpoint(ckpt)
    assert state is not None
    assert state["step"] == STOP_AT
    assert state["sampler"]["position"] == 8 * STOP_AT
    assert state["scheduler"]["last_epoch"]
    assert {"python", "torch"} <= set(state["rng"])
    return ckpt


def test_restart_resumes_exactly_with_fresh_objects(script: Path, tmp_path: Path) -> None:
    full = _reference(script, tmp_path)
    ckpt = _stopped(script, tmp_path)
    torch.manual_seed(12345)  # whatever the generators hold now must not matter
    random.seed(12345)
    out = tmp_path / "resumed.pt"
    run = _in_process(script, ckpt, out)
    assert run.finished
    assert run.step == ITERS
    _equal(full, out)


def test_restart_resumes_exactly_in_a_fresh_process(script: Path, tmp_path: Path) -> None:
    full = _reference(script, tmp_path)
    ckpt = _stopped(script, tmp_path)
    out = tmp_path / "resumed.pt"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWCON_", "WORLD"))}
    env.pop("RANK", None)
    env.pop("LOCAL_RANK", None)
    env.update(
        PYTHONPATH=str(REPO),
        FLOWCON_CHECKPOINT_DIR=str(ckpt),
        FLOWCON_GLOBAL_BATCH_SIZE="8",
        ITERS=str(ITERS),
        OUT=str(out),
    )
    proc = subprocess.run(
        [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    _equal(full, out)


def test_without_the_new_state_the_run_differs(script: Path, tmp_path: Path) -> None:
    """The control: dropping RNG and scheduler state from the checkpoint changes the result,
    so the equality above is not an accident of the script."""
    full = _reference(script, tmp_path)
    ckpt = _stopped(script, tmp_path)
    state = elastic.load_checkpoint(ckpt)
    assert state is not None
    for key in ("rng", "scheduler"):
        del state[key]
    elastic.save_checkpoint(ckpt, state)
    out = tmp_path / "resumed.pt"
    _in_process(script, ckpt, out)
    with pytest.raises(AssertionError):
        _equal(full, out)


@pytest.mark.slow
def test_two_gloo_ranks_resume_exactly(script: Path, tmp_path: Path) -> None:
    """World size 2 (two local workers, gloo): each rank gets its own generators back."""

    def launch(ckpt: Path, out: Path, stop_at: int) -> int:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("FLOWCON_", "WORLD"))}
        env.pop("RANK", None)
        env.pop("LOCAL_RANK", None)
        env.update(
            PYTHONPATH=str(REPO),
            WORLD_SIZE="2",
            RANK="0",
            LOCAL_WORLD_SIZE="2",
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(21000 + (os.getpid() + stop_at) % 2000),
            FLOWCON_CHECKPOINT_DIR=str(ckpt),
            FLOWCON_GLOBAL_BATCH_SIZE="8",
            ITERS=str(ITERS),
            STOP_AT=str(stop_at),
            OUT=str(out),
        )
        proc = subprocess.run(
            [sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=180
        )
        assert proc.returncode in (0, elastic.EXIT_PREEMPTED), proc.stderr[-2000:]
        return proc.returncode

    assert launch(tmp_path / "a", tmp_path / "full.pt", 0) == 0
    assert launch(tmp_path / "b", tmp_path / "part.pt", STOP_AT) == elastic.EXIT_PREEMPTED
    state = elastic.load_checkpoint(tmp_path / "b")
    assert state is not None
    assert len(state["rng_ranks"]) == 2
    assert not torch.equal(state["rng_ranks"][0]["torch"], state["rng_ranks"][1]["torch"])
    assert launch(tmp_path / "b", tmp_path / "resumed.pt", 0) == 0
    _equal(tmp_path / "full.pt", tmp_path / "resumed.pt")
