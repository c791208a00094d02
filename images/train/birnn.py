"""Bidirectional RNN classifying which of 8 motifs is hidden in a noisy sequence;
evaluation function: softmax cross entropy. Starts on a plateau at ln(8), then drops
once the motif detectors form."""

from __future__ import annotations

import sys

import torch
from common import env_int, optimize, setup_torch, train_loop
from torch import nn
from torch.nn import functional as F

CLASSES = 8
MOTIF_LEN = 6
FEATURES = 4


class BiRNN(nn.Module):
    def __init__(self, hidden: int = 64) -> None:
        super().__init__()
        self.rnn = nn.RNN(FEATURES, hidden, batch_first=True, bidirectional=True)
        self.head = nn.Linear(2 * hidden, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out.max(dim=1).values)


def main() -> int:
    setup_torch(seed=5)
    batch = env_int("FLOWCON_BATCH", 64)
    length = env_int("FLOWCON_SEQ_LEN", 40)
    gen = torch.Generator().manual_seed(15)
    motifs = torch.randn(CLASSES, MOTIF_LEN, FEATURES, generator=gen)
    model = BiRNN()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def sample() -> tuple[torch.Tensor, torch.Tensor]:
        y = torch.randint(0, CLASSES, (batch,), generator=gen)
        x = 1.0 * torch.randn(batch, length, FEATURES, generator=gen)
        pos = torch.randint(0, length - MOTIF_LEN, (batch,), generator=gen)
        for b in range(batch):
            p = int(pos[b])
            x[b, p : p + MOTIF_LEN] += motifs[y[b]]
        return x, y

    def step(i: int) -> float:
        x, y = sample()
        loss = F.cross_entropy(model(x), y)
        return optimize(opt, loss)

    return train_loop("birnn", step, default_iterations=2500)


if __name__ == "__main__":
    sys.exit(main())
