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
epoch across scale events; ``samples`` (consumed since the start, after the step),
``batch_loss`` (the loss over the whole global batch, not only rank 0's share) and ``lr``.

The global batch may change at a scale event (a joiner's FLOWCON_GLOBAL_BATCH_SIZE, or a
restart with another one): ``HybridScaling`` moves the learning rate linearly to
``LR * batch / reference`` over FLOWCON_LR_RAMP_STEPS steps (Elan III); the reference is
FLOWCON_REFERENCE_BATCH_SIZE (set for a job with a batch range: the batch it was submitted
with) or else the batch the job started with.

Env: FLOWCON_ITERATIONS (default 1000), STEP_SLEEP (seconds, to slow the demo down),
START_SLEEP (seconds each worker waits before it trains, as a real job's start-up), LR
(default 0.01), STEP_CPU (CPU seconds of extra compute per step, as a heavier model would
spend: a CPU limit on the container stretches it, unlike a sleep), plus what the executor
sets (WORLD_SIZE, RANK, FLOWCON_GLOBAL_BATCH_SIZE, ...).
"""

from __future__ import annotations

import os
import time

import torch

from flowcon import elastic
from flowcon.elastic.data import ElasticSampler
from flowcon.elastic.lr import HybridScaling

SAMPLES = 4096
FEATURES = 32
# the learning rate for the reference batch (see above; env LR; at 0.01 the loss of two
# runs with different initial weights differs by up to 50 %:
# tests/elastic/test_elastic_hybrid_loss.py compares at 0.003, where they agree within 1 %
# after 7 epochs)
LR = float(os.environ.get("LR") or 0.01)


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
    # START_SLEEP: seconds every start of a worker spends before it trains, a stand-in for
    # what a real job pays there (reading its data set, building a large model, CUDA init)
    time.sleep(float(os.environ.get("START_SLEEP", "0") or 0))
    torch.manual_seed(0)  # identical initial weights on every rank
    x, y = dataset()
    net = torch.nn.Sequential(
        torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)
    )
    model = run.wrap(net)
    opt = torch.optim.SGD(net.parameters(), lr=LR, momentum=0.9)
    sampler = ElasticSampler(SAMPLES, seed=0)
    # restored from the checkpoint or the running workers' state: the first batch stays the
    # reference of LR
    scaling = HybridScaling(LR, run.env.global_batch_size)
    pause = float(os.environ.get("STEP_SLEEP", "0") or 0)
    busy = float(os.environ.get("STEP_CPU", "0") or 0)
    steps = run.steps(
        model, opt, run.env.iterations or 1000, sampler=sampler, batch_scaling=scaling
    )
    for step in steps:
        gbs = run.env.global_batch_size  # read each step: a stop-free job may change it
        lr = scaling.apply(opt, step)
        epoch, every = sampler.epoch, sampler.global_batch(gbs)  # all ranks' ids this step
        idx = torch.tensor(sampler.batch(gbs, run.rank, run.world_size))
        xb, yb = x[idx].to(run.device), y[idx].to(run.device)
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        batch_loss = loss.item()
        if run.world_size > 1 and run.rank == 0:  # the step's loss over every rank's share
            with torch.no_grad():
                ids = torch.tensor(every)
                out = net(x[ids].to(run.device))
                batch_loss = torch.nn.functional.mse_loss(out, y[ids].to(run.device)).item()
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
            batch_loss=round(batch_loss, 6),
            lr=round(lr, 8),
            local_batch=len(idx),
            samples=sampler.position,
            epoch=epoch,
            sample_ids=every,
        )


if __name__ == "__main__":
    elastic.main(train)
