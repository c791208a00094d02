"""Example elastic training job: a small MLP on synthetic regression data.

Written as single-device code; flowcon.elastic supplies DDP, the data position, checkpoints
and the scaling mode the executor picks:

- ``FLOWCON_SCALING=restart`` (or unset): checkpoint on SIGTERM and every K steps, resume
  after a restart with another world size;
- ``FLOWCON_SCALING=stopfree``: workers join (``FLOWCON_JOIN=1``) and leave (SIGUSR1) the
  running job at agreed step boundaries, without a restart (docs/elastic.md, "Stop-free
  scaling"); SIGTERM still checkpoints and stops.

Every step trains on the next global batch of an ``ElasticSampler`` (its order depends on
the seed and the epoch only, its position is one integer), so rescaling changes speed, not
the math. Each rank's loss is the mean over its share; the gradient is averaged as the global
batch mean.

Rank 0's step line carries ``epoch`` and ``sample_ids`` (the whole global batch of the step:
the ranks' shares partition it), so a benchmark can check that each sample is used once per
epoch across scale events.

Env: FLOWCON_ITERATIONS (default 1000), STEP_SLEEP (seconds, to slow the demo down),
STEP_CPU (CPU seconds of extra compute per step, as a heavier model would spend: a CPU
limit on the container stretches it, unlike a sleep), plus what the executor sets
(WORLD_SIZE, RANK, FLOWCON_GLOBAL_BATCH_SIZE, ...).
"""

from __future__ import annotations

import os
import time

import torch

from flowcon import elastic
from flowcon.elastic.data import ElasticSampler

SAMPLES = 4096
FEATURES = 32


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(SAMPLES, 1, generator=g)


def compute(cpu_s: float) -> None:
    """Spend ``cpu_s`` seconds of this thread's CPU time (wall time grows when throttled)."""
    end = time.thread_time() + cpu_s
    while time.thread_time() < end:
        pass


def train(run: elastic.Elastic) -> None:
    torch.manual_seed(0)  # identical initial weights on every rank
    x, y = dataset()
    net = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    )
    model = run.wrap(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    sampler = ElasticSampler(SAMPLES, seed=0)
    pause = float(os.environ.get("STEP_SLEEP", "0") or 0)
    busy = float(os.environ.get("STEP_CPU", "0") or 0)
    for step in run.steps(model, opt, run.env.iterations or 1000, sampler=sampler):
        gbs = run.env.global_batch_size  # read each step: a stop-free job may change it
        epoch, every = sampler.epoch, sampler.global_batch(gbs)  # all ranks' ids this step
        idx = torch.tensor(sampler.batch(gbs, run.rank, run.world_size))
        xb, yb = x[idx].to(run.device), y[idx].to(run.device)
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        sampler.advance(gbs)
        if busy:
            compute(busy)
        if pause:
            time.sleep(pause)
        run.report(
            step=step,
            loss=round(loss.item(), 5),
            local_batch=len(idx),
            epoch=epoch,
            sample_ids=every,
        )


if __name__ == "__main__":
    elastic.main(train)
