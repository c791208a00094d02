"""LSTM forecasting a noisy mixture of sine waves one step ahead; evaluation function:
squared loss (the paper's LSTM-CRF on PyTorch). Smooth, gradual descent."""

from __future__ import annotations

import math
import sys

import torch
from common import env_int, optimize, setup_torch, train_loop
from torch import nn
from torch.nn import functional as F


def batch_of_waves(batch: int, length: int, gen: torch.Generator) -> torch.Tensor:
    t = torch.arange(length + 1, dtype=torch.float32)
    freq = torch.rand(batch, 3, 1, generator=gen) * 0.3 + 0.05
    phase = torch.rand(batch, 3, 1, generator=gen) * 2 * math.pi
    amp = torch.rand(batch, 3, 1, generator=gen) + 0.2
    waves = (amp * torch.sin(freq * t + phase)).sum(1)
    return waves + 0.05 * torch.randn(waves.shape, generator=gen)


class Forecaster(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.lstm = nn.LSTM(1, hidden, num_layers=2, batch_first=True)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x.unsqueeze(-1))
        return self.head(out).squeeze(-1)


def main() -> int:
    setup_torch(seed=4)
    batch = env_int("FLOWCON_BATCH", 32)
    length = env_int("FLOWCON_SEQ_LEN", 50)
    gen = torch.Generator().manual_seed(14)
    model = Forecaster()
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)

    def step(i: int) -> float:
        seq = batch_of_waves(batch, length, gen)
        loss = F.mse_loss(model(seq[:, :-1]), seq[:, 1:])
        return optimize(opt, loss)

    return train_loop("lstm", step, default_iterations=1000)


if __name__ == "__main__":
    sys.exit(main())
