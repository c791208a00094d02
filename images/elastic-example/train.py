"""Example elastic training job: a small MLP on synthetic regression data.

Written as single-device code; flowcon.elastic supplies DDP, data sharding, checkpoints on
SIGTERM and every K steps, and resume. Every step trains on the same global batch whatever
the world size (rank r takes its strided share), so rescaling changes speed, not the math.

Env: FLOWCON_ITERATIONS (default 1000), STEP_SLEEP (seconds, to slow the demo down),
plus what the executor sets (WORLD_SIZE, RANK, FLOWCON_GLOBAL_BATCH_SIZE, ...).
"""

from __future__ import annotations

import os
import time

import torch

from flowcon import elastic

SAMPLES = 4096
FEATURES = 32


def dataset() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(SAMPLES, FEATURES, generator=g)
    w = torch.randn(FEATURES, 1, generator=g)
    return x, x @ w + 0.1 * torch.randn(SAMPLES, 1, generator=g)


def train(run: elastic.Elastic) -> None:
    torch.manual_seed(0)  # identical initial weights on every rank
    x, y = dataset()
    model = run.wrap(
        torch.nn.Sequential(torch.nn.Linear(FEATURES, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    gbs = run.env.global_batch_size
    pause = float(os.environ.get("STEP_SLEEP", "0") or 0)
    for step in run.steps(model, opt, run.env.iterations or 1000):
        start = (step - 1) * gbs
        batch = [(start + i) % SAMPLES for i in range(gbs)]
        idx = torch.tensor(list(run.shard(batch)))
        xb, yb = x[idx].to(run.device), y[idx].to(run.device)
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if pause:
            time.sleep(pause)
        run.report(step=step, loss=round(loss.item(), 5), local_batch=len(idx))


if __name__ == "__main__":
    elastic.main(train)
