"""A plain PyTorch DDP training script, as PyTorch's DDP and torchrun tutorials teach it.

No FlowCon import: it reads torchrun's variables (LOCAL_RANK, RANK, WORLD_SIZE, and
MASTER_ADDR/MASTER_PORT through ``init_process_group``), trains a tiny model on synthetic
data, saves a snapshot (model, optimizer, epochs run) every ``save_every`` epochs from rank
0, and resumes from it when restarted: PyTorch's fault-tolerant torchrun pattern. gloo on
CPU, NCCL when the process has a GPU.

    torchrun --nproc_per_node=2 train_ddp.py 20 1 --snapshot_path /flowcon/checkpoint/s.pt
"""

import argparse
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def say(msg):
    sys.stdout.write(msg + "\n")  # one write: ranks sharing a terminal do not interleave
    sys.stdout.flush()


def ddp_setup() -> None:
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group(backend=backend)


class Trainer:
    def __init__(self, model, data, optimizer, save_every, snapshot_path, sleep):
        self.local_rank = int(os.environ["LOCAL_RANK"])
        self.global_rank = int(os.environ["RANK"])
        self.device = torch.device("cuda", self.local_rank) if torch.cuda.is_available() else None
        self.model = model.to(self.device) if self.device else model
        self.train_data = data
        self.optimizer = optimizer
        self.save_every = save_every
        self.snapshot_path = snapshot_path
        self.sleep = sleep
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            say("Loading snapshot")
            self._load_snapshot(snapshot_path)
        ids = [self.local_rank] if self.device else None
        self.model = DDP(self.model, device_ids=ids)

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path, map_location="cpu")
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.optimizer.load_state_dict(snapshot["OPTIMIZER_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        say(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        loss = F.mse_loss(self.model(source), targets)
        loss.backward()
        self.optimizer.step()
        return loss.item()

    def _run_epoch(self, epoch):
        self.train_data.sampler.set_epoch(epoch)
        loss = 0.0
        for source, targets in self.train_data:
            if self.device:
                source, targets = source.to(self.device), targets.to(self.device)
            loss = self._run_batch(source, targets)
            time.sleep(self.sleep)
        world = dist.get_world_size()
        say(
            f"[RANK{self.global_rank}] Epoch {epoch} | world {world} | "
            f"Steps: {len(self.train_data)} | loss {loss:.4f}"
        )

    def _save_snapshot(self, epoch):
        snapshot = {
            "MODEL_STATE": self.model.module.state_dict(),
            "OPTIMIZER_STATE": self.optimizer.state_dict(),
            "EPOCHS_RUN": epoch + 1,
        }
        tmp = self.snapshot_path + ".tmp"
        torch.save(snapshot, tmp)
        os.replace(tmp, self.snapshot_path)  # a stop mid-save leaves the old snapshot
        say(f"Epoch {epoch} | Training snapshot saved at {self.snapshot_path}")

    def train(self, max_epochs):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.global_rank == 0 and (epoch + 1) % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 16, generator=g)
    y = x @ torch.randn(16, 1, generator=g)
    torch.manual_seed(0)  # the same initial weights on every rank
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    return TensorDataset(x, y), model, optimizer


def main(total_epochs, save_every, batch_size, snapshot_path, sleep):
    ddp_setup()
    say(
        f"start rank {os.environ['RANK']} local_rank {os.environ['LOCAL_RANK']} "
        f"world {os.environ['WORLD_SIZE']} local_world {os.environ['LOCAL_WORLD_SIZE']}"
    )
    dataset, model, optimizer = load_train_objs()
    loader = DataLoader(
        dataset, batch_size=batch_size, shuffle=False, sampler=DistributedSampler(dataset)
    )
    Trainer(model, loader, optimizer, save_every, snapshot_path, sleep).train(total_epochs)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="simple distributed training job")
    parser.add_argument("total_epochs", type=int, help="Total epochs to train the model")
    parser.add_argument("save_every", type=int, help="How often to save a snapshot")
    parser.add_argument("--batch_size", default=32, type=int, help="Input batch size")
    parser.add_argument("--snapshot_path", default="snapshot.pt", help="Where the snapshot is")
    parser.add_argument("--sleep", default=0.0, type=float, help="Seconds to wait per step")
    args = parser.parse_args()
    main(args.total_epochs, args.save_every, args.batch_size, args.snapshot_path, args.sleep)
