"""A checkpoint-restart with another global batch (the executor starts the new
containers with the batch picked for their GPU count; Elan III's hybrid
scaling). The data position is one integer of samples, so the resumed run takes the next
``B_new`` samples; ``HybridScaling``, restored at the checkpoint's batch, ramps the LR to
the new batch from the first step after the resume. The result equals an uninterrupted run
that changes its batch at that step."""

from __future__ import annotations

import os
import runpy
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from flowcon import elastic  # noqa: E402

ITERS, STOP_AT, SMALL, LARGE, RAMP = 12, 5, 8, 16, 3

# ``scaling.global_batch`` is the batch of each step; the reference run changes it itself
# (SWITCH_AT), the restarted one gets it from FLOWCON_GLOBAL_BATCH_SIZE at the resume.
SCRIPT = """
import os
import torch
from flowcon import elastic
from flowcon.elastic.data import ElasticSampler
from flowcon.elastic.lr import HybridScaling

def train(run):
    torch.set_num_threads(1)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    x, y = torch.randn(60, 4, generator=g), torch.randn(60, 1, generator=g)
    net = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    model = run.wrap(net)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sampler = ElasticSampler(60, seed=3)
    scaling = HybridScaling(0.05, run.env.global_batch_size, reference_batch=8, ramp_steps=3)
    stop_at = int(os.environ.get("STOP_AT", "0"))
    switch_at = int(os.environ.get("SWITCH_AT", "0"))
    lrs = []
    for step in run.steps(model, opt, int(os.environ["ITERS"]), sampler=sampler,
                          batch_scaling=scaling):
        if step == switch_at:
            scaling.set_global_batch(16, step)
        gbs = scaling.global_batch
        lrs.append((step, gbs, scaling.apply(opt, step)))
        idx = torch.tensor(sampler.batch(gbs, run.rank, run.world_size))
        loss = torch.nn.functional.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sampler.advance(gbs)
        if step == stop_at:
            run.stop_requested = True  # what SIGTERM does
    run.lrs = lrs
    if os.environ.get("OUT"):
        torch.save(net.state_dict(), os.environ["OUT"])
"""


def _run(script: Path, ckpt: Path, out: Path, gbs: int, **env: str) -> Any:
    train: Any = runpy.run_path(str(script), run_name="batch_resume")["train"]
    e = elastic.ElasticEnv(checkpoint_dir=ckpt, iterations=ITERS, global_batch_size=gbs)
    run = elastic.Elastic(e, checkpoint_every=1000, install_signal_handlers=False)
    saved = dict(os.environ)
    os.environ.update(ITERS=str(ITERS), OUT=str(out), **env)
    try:
        train(run)
    finally:
        os.environ.clear()
        os.environ.update(saved)
    return run


def test_a_restart_resumes_with_another_global_batch(tmp_path: Path) -> None:
    script = tmp_path / "train_batch.py"
    script.write_text(SCRIPT)
    full = _run(
        script, tmp_path / "ck-full", tmp_path / "full.pt", SMALL, SWITCH_AT=str(STOP_AT + 1)
    )
    assert full.finished
    first = _run(script, tmp_path / "ck", tmp_path / "part.pt", SMALL, STOP_AT=str(STOP_AT))
    assert first.preempted
    assert first.step == STOP_AT
    state = elastic.load_checkpoint(tmp_path / "ck")
    assert state is not None
    assert state["sampler"]["position"] == SMALL * STOP_AT
    # the executor restarts the job with FLOWCON_GLOBAL_BATCH_SIZE=16
    resumed = _run(script, tmp_path / "ck", tmp_path / "resumed.pt", LARGE)
    assert resumed.finished
    assert resumed.step == ITERS
    # the same batches and learning rates from the resume on: 16 samples a step, the LR
    # going 0.05 -> 0.1 over RAMP steps from the first step after the checkpoint
    assert resumed.lrs == [t for t in full.lrs if t[0] > STOP_AT]
    assert [round(lr, 6) for _, _, lr in resumed.lrs[: RAMP + 1]] == [
        0.05,
        0.066667,
        0.083333,
        0.1,
    ]
    assert {b for _, b, _ in resumed.lrs} == {LARGE}
    a, b = torch.load(tmp_path / "full.pt"), torch.load(tmp_path / "resumed.pt")
    for key in a:
        assert torch.equal(a[key], b[key]), key
