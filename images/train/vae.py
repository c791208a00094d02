"""VAE on procedurally drawn digits; evaluation function: reconstruction loss + KL
(per image). Fast drop in the first steps, then a long slow tail."""

from __future__ import annotations

import sys

import torch
from common import env_int, optimize, setup_torch, train_loop
from digits import make_digits
from torch import nn
from torch.nn import functional as F


class VAE(nn.Module):
    def __init__(self, hidden: int = 400, latent: int = 20) -> None:
        super().__init__()
        self.enc = nn.Linear(784, hidden)
        self.mu = nn.Linear(hidden, latent)
        self.logvar = nn.Linear(hidden, latent)
        self.dec1 = nn.Linear(latent, hidden)
        self.dec2 = nn.Linear(hidden, 784)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return torch.sigmoid(self.dec2(F.relu(self.dec1(z)))), mu, logvar


def main() -> int:
    setup_torch(seed=1)
    batch = env_int("FLOWCON_BATCH", 128)
    images, _ = make_digits(env_int("FLOWCON_SAMPLES", 4096), seed=11)
    data = torch.from_numpy(images).view(-1, 784)
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step(i: int) -> float:
        idx = torch.randint(0, data.shape[0], (batch,))
        x = data[idx]
        recon, mu, logvar = model(x)
        bce = F.binary_cross_entropy(recon, x, reduction="sum")
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = (bce + kld) / batch
        return optimize(opt, loss)

    return train_loop("vae", step, default_iterations=2000)


if __name__ == "__main__":
    sys.exit(main())
