"""A tiny stop-free training job that the stop-free tests start as worker processes.

Each worker appends one JSON record per step (step, sample ids, rank, world, pid) to
``$SF_OUT/ids-<pid>.jsonl``; it waits at the top of a step while the step number is above
the integer in ``$SF_OUT/gate`` (polling a file, no collective pending), so a test can hold
the job still while joiners get ready; a worker held there writes the step it waits for to
``$SF_OUT/held-<pid>``. ``SF_STEP_S``: every worker sleeps that long in each
step; ``SF_SLOW_WORKER``/``SF_SLOW_S``: that worker id sleeps that much longer (a straggler).
``SF_RAMP=K``: the LR follows ``HybridScaling`` (ramp over K steps) instead of StepLR;
``SF_BATCH_AT=S:B``: at step S the script asks for global batch B (``set_global_batch``).
The last rank 0 saves the final model to ``$SF_OUT/final.pt``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import torch

from flowcon.elastic.data import ElasticSampler
from flowcon.elastic.lr import HybridScaling
from flowcon.elastic.stopfree import StopFree, run_worker

SIZE = 66
FEATURES = 8


def data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SIZE, FEATURES, generator=g)
    y = x @ torch.randn(FEATURES, 1, generator=g) + 0.1 * torch.randn(SIZE, 1, generator=g)
    return x, y


def gate(out: Path) -> int:
    try:
        return int((out / "gate").read_text().strip() or 10**9)
    except (OSError, ValueError):
        return 10**9


def train(run: StopFree) -> None:
    torch.set_num_threads(1)
    out = Path(os.environ["SF_OUT"])
    slow = os.environ.get("SF_SLOW_WORKER") == run.worker_id
    slow_s = float(os.environ.get("SF_SLOW_S") or 0) if slow else 0.0
    step_s = float(os.environ.get("SF_STEP_S") or 0)
    x, y = data()
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    sched: Any = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.9)
    hybrid = None
    if os.environ.get("SF_RAMP"):  # Elan III: the LR follows the global batch (no StepLR)
        hybrid = HybridScaling(0.05, run.global_batch_size, ramp_steps=int(os.environ["SF_RAMP"]))
        sched = None
    batch_at = [int(v) for v in os.environ.get("SF_BATCH_AT", "").split(":") if v]
    sampler = ElasticSampler(SIZE, seed=1)
    ddp = run.wrap(model)
    log = open(out / f"ids-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
    steps = run.steps(model, opt, scheduler=sched, sampler=sampler, batch_scaling=hybrid)
    for step in steps:
        if step > gate(out):
            # held: this worker's vote at the boundary before ``step`` is done
            (out / f"held-{os.getpid()}").write_text(str(step))
        while step > gate(out):
            time.sleep(0.02)
        if hybrid is not None:
            hybrid.apply(opt, step)
        if batch_at and step == batch_at[0]:
            run.set_global_batch(batch_at[1])  # from the next step on
        ids = run.batch()
        loss = torch.nn.functional.mse_loss(ddp(x[ids]), y[ids])
        opt.zero_grad()
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
        sampler.advance(run.global_batch_size)
        if slow_s or step_s:
            time.sleep(slow_s + step_s)
        lr = opt.param_groups[0]["lr"]
        rec = {"step": step, "ids": ids, "rank": run.rank, "world": run.world_size, "lr": lr}
        log.write(json.dumps({**rec, "pid": os.getpid(), "worker": run.worker_id}) + "\n")
        run.report(step=step, loss=round(loss.item(), 6))
    if run.finished and run.rank == 0:
        torch.save(model.state_dict(), out / "final.pt")


if __name__ == "__main__":
    run_worker(train, timeout_s=float(os.environ.get("SF_TIMEOUT_S") or 5))
