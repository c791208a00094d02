"""The smallest DDP script with a snapshot (docs/jobs.md, "Launchers"): no FlowCon import,
the same under torchrun and under ``launcher: none``."""

import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

p = argparse.ArgumentParser()
p.add_argument("--snapshot", default="snapshot.pt")
p.add_argument("--epochs", type=int, default=20)
args = p.parse_args()

gpu = torch.cuda.is_available()
if gpu:
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
dist.init_process_group("nccl" if gpu else "gloo")  # MASTER_ADDR/PORT, RANK, WORLD_SIZE
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(16, 1).to("cuda" if gpu else "cpu")
opt = torch.optim.SGD(model.parameters(), lr=0.01)
start = 0
if os.path.exists(args.snapshot):  # resume after a rescale
    snap = torch.load(args.snapshot, map_location="cpu")
    model.load_state_dict(snap["model"])
    opt.load_state_dict(snap["opt"])
    start = snap["epoch"]
ddp = DDP(model, device_ids=[int(os.environ["LOCAL_RANK"])] if gpu else None)
for epoch in range(start, args.epochs):
    x = torch.randn(64 // dist.get_world_size(), 16, device=model.weight.device)
    loss = ddp(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(f"[RANK{rank}] Epoch {epoch} | loss {loss.item():.4f}", flush=True)
    if rank == 0:  # atomic: a stop mid-save keeps the old snapshot
        state = {"model": model.state_dict(), "opt": opt.state_dict(), "epoch": epoch + 1}
        torch.save(state, args.snapshot + ".tmp")
        os.replace(args.snapshot + ".tmp", args.snapshot)
dist.destroy_process_group()
