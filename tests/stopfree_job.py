"""A tiny stop-free training job that the stop-free tests start as worker processes.

Each worker appends one JSON record per step (step, sample ids, rank, world, pid) to
``$SF_OUT/ids-<pid>.jsonl``; it waits at the top of a step while the step number is above
the integer in ``$SF_OUT/gate`` (polling a file, no collective pending), so a test can hold
the job still while joiners get ready. ``SF_STEP_S``: every worker sleeps that long in each
step; ``SF_SLOW_WORKER``/``SF_SLOW_S``: that worker id sleeps that much longer (a straggler). The last rank 0 saves the final model to
``$SF_OUT/final.pt``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import torch

from flowcon.elastic.data import ElasticSampler
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
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.9)
    sampler = ElasticSampler(SIZE, seed=1)
    ddp = run.wrap(model)
    log = open(out / f"ids-{os.getpid()}.jsonl", "a", buffering=1)  # noqa: SIM115
    for step in run.steps(model, opt, scheduler=sched, sampler=sampler):
        while step > gate(out):
            time.sleep(0.02)
        ids = run.batch()
        loss = torch.nn.functional.mse_loss(ddp(x[ids]), y[ids])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if slow_s or step_s:
            time.sleep(slow_s + step_s)
        rec = {"step": step, "ids": ids, "rank": run.rank, "world": run.world_size}
        log.write(json.dumps({**rec, "pid": os.getpid(), "worker": run.worker_id}) + "\n")
        run.report(step=step, loss=round(loss.item(), 6))
    if run.finished and run.rank == 0:
        torch.save(model.state_dict(), out / "final.pt")


if __name__ == "__main__":
    run_worker(train, timeout_s=float(os.environ.get("SF_TIMEOUT_S") or 5))
