"""A second MNIST-like job (the paper's "MNIST on TensorFlow"): a two-layer MLP on
noisier digits with 10 % label noise; cross entropy. Slower descent to a plateau well
above zero (the label noise bounds it)."""

from __future__ import annotations

import sys

import numpy as np
import torch
from common import env_int, optimize, setup_torch, train_loop
from digits import make_digits
from torch import nn
from torch.nn import functional as F


def main() -> int:
    setup_torch(seed=3)
    batch = env_int("FLOWCON_BATCH", 128)
    images, labels = make_digits(env_int("FLOWCON_SAMPLES", 4096), seed=13, noise=0.3)
    rng = np.random.default_rng(13)
    flip = rng.random(labels.shape) < 0.1
    labels = np.where(flip, rng.integers(0, 10, size=labels.shape), labels)
    x_all = torch.from_numpy(images).view(-1, 784)
    y_all = torch.from_numpy(labels)
    model = nn.Sequential(
        nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
    )
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    def step(i: int) -> float:
        idx = torch.randint(0, x_all.shape[0], (batch,))
        loss = F.cross_entropy(model(x_all[idx]), y_all[idx])
        return optimize(opt, loss)

    return train_loop("mnist-mlp", step, default_iterations=1000)


if __name__ == "__main__":
    sys.exit(main())
