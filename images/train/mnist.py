"""MNIST-style CNN on procedurally drawn digits; evaluation function: cross entropy.
Converges quickly to a low loss, then grows slowly: the textbook FlowCon case."""

from __future__ import annotations

import sys

import torch
from common import env_int, optimize, setup_torch, train_loop
from digits import make_digits
from torch import nn
from torch.nn import functional as F


class Net(nn.Module):
    """The network of PyTorch's own MNIST example."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3)
        self.conv2 = nn.Conv2d(32, 64, 3)
        self.drop1 = nn.Dropout(0.25)
        self.drop2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv1(x))
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = F.relu(self.fc1(self.drop1(x).flatten(1)))
        return self.fc2(self.drop2(x))


def main() -> int:
    setup_torch(seed=2)
    batch = env_int("FLOWCON_BATCH", 64)
    images, labels = make_digits(env_int("FLOWCON_SAMPLES", 4096), seed=12)
    x_all, y_all = torch.from_numpy(images), torch.from_numpy(labels)
    model = Net()
    opt = torch.optim.Adadelta(model.parameters(), lr=1.0)

    def step(i: int) -> float:
        idx = torch.randint(0, x_all.shape[0], (batch,))
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        return optimize(opt, loss)

    return train_loop("mnist", step, default_iterations=600)


if __name__ == "__main__":
    sys.exit(main())
