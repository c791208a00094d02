"""GRU on the adding problem (sum the two marked values of a random sequence);
evaluation function: quadratic loss. Sits near the variance plateau (~0.17) for a
while, then falls steeply: a late-converging shape unlike the others."""

from __future__ import annotations

import sys

import torch
from common import env_int, optimize, setup_torch, train_loop
from torch import nn
from torch.nn import functional as F


class Adder(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.gru = nn.GRU(2, hidden, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(x)
        return self.head(out[:, -1]).squeeze(-1)


def adding_batch(
    batch: int, length: int, gen: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor]:
    values = torch.rand(batch, length, generator=gen)
    marks = torch.zeros(batch, length)
    first = torch.randint(0, length // 2, (batch,), generator=gen)
    second = torch.randint(length // 2, length, (batch,), generator=gen)
    rows = torch.arange(batch)
    marks[rows, first] = 1.0
    marks[rows, second] = 1.0
    return torch.stack([values, marks], dim=-1), (values * marks).sum(1)


def main() -> int:
    setup_torch(seed=6)
    batch = env_int("FLOWCON_BATCH", 64)
    length = env_int("FLOWCON_SEQ_LEN", 40)
    gen = torch.Generator().manual_seed(16)
    model = Adder()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def step(i: int) -> float:
        x, y = adding_batch(batch, length, gen)
        loss = F.mse_loss(model(x), y)
        return optimize(opt, loss)

    return train_loop("gru", step, default_iterations=2500)


if __name__ == "__main__":
    sys.exit(main())
