"""Which device a worker trains on, and which collective backend its group uses.

NCCL moves CUDA tensors GPU to GPU (NVLink, PCIe peer-to-peer, the network) but needs each
rank on its own GPU: two ranks on one GPU is an error ("Duplicate GPU detected"). gloo runs
anywhere and takes CUDA tensors too (it stages them through host memory). So:

- ``backend_for(identities)``: "nccl" when every rank is on a GPU and no two share one
  (``identities``: one per rank, the GPU's UUID or "cpu"), else "gloo";
- ``restart_backend``: the same rule for a restart-mode job, decided before any group
  exists, from what one container sees: ranks spread over its GPUs, so they share a GPU
  exactly when the container runs more workers than it has GPUs;
- ``identity(device)``: the UUID of a CUDA device (or ``cuda:N@host`` where torch cannot
  say), "cpu" for the CPU.

``apply_gpu_share`` puts the agent's CUDA MPS share for this container (a file the agent
writes, docs/agent.md "GPU shares") into the environment before CUDA starts.

The stop-free runtime forms each generation's group with gloo (the votes and the small
objects are CPU tensors), gathers the ranks' identities and, when ``backend_for`` says
NCCL, adds an NCCL group over the same ranks for the gradients and the replicated state.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Final

import torch
import torch.distributed as dist

from flowcon import contract

CPU: Final = "cpu"


def backend_for(identities: Sequence[str], nccl: bool | None = None) -> str:
    """ "nccl" when every rank has a GPU of its own (and NCCL is built), else "gloo"."""
    have_nccl = dist.is_nccl_available() if nccl is None else nccl
    if not identities or not have_nccl:
        return "gloo"
    if any(i == CPU or not i for i in identities):
        return "gloo"
    return "nccl" if len(set(identities)) == len(identities) else "gloo"


def restart_backend(device: torch.device, local_world_size: int, visible_gpus: int) -> str:
    """Restart mode: NCCL on GPUs unless this container's ranks share a GPU."""
    if device.type != "cuda" or not dist.is_nccl_available():
        return "gloo"
    return "nccl" if local_world_size <= visible_gpus else "gloo"


def identity(device: torch.device) -> str:
    """A name of the device that differs between any two GPUs of the job."""
    if device.type != "cuda":
        return CPU
    index = device.index if device.index is not None else torch.cuda.current_device()
    try:
        uuid = str(torch.cuda.get_device_properties(index).uuid)
    except (AttributeError, RuntimeError):
        uuid = ""
    return f"GPU-{uuid}" if uuid and not uuid.startswith("GPU-") else (uuid or _fallback(index))


def _fallback(index: int) -> str:
    return f"cuda:{index}@{socket.gethostname()}"


# ---------------------------------------------------------------- the agent's GPU share

MPS_VARS: Final = ("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT")


def share_path(environ: Mapping[str, str] | None = None) -> Path:
    """Where the agent's GPU share for this container is: ``FLOWCON_GPU_SHARE_FILE``, else
    ``/flowcon/gpu-share/<short container id>.json`` (the id is the default hostname)."""
    e = os.environ if environ is None else environ
    explicit = e.get(contract.ENV_GPU_SHARE_FILE, "").strip()
    if explicit:
        return Path(explicit)
    return Path(contract.GPU_SHARE_MOUNT) / f"{socket.gethostname()[:12]}.json"


def apply_gpu_share(environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put the agent's MPS share into this process's environment before CUDA starts (MPS
    reads it when the client's context is created). Variables already set (by the user or
    the container's env) win; no file, an unreadable one, or one without ``env``: nothing
    changes. Returns what was set."""
    e = os.environ if environ is None else environ
    try:
        raw = json.loads(share_path(e).read_text())
    except (OSError, ValueError):
        return {}
    values = raw.get("env") if isinstance(raw, dict) else None
    if not isinstance(values, dict):
        return {}
    done = {}
    for key in MPS_VARS:
        value = values.get(key)
        if isinstance(value, str) and value and key not in e:
            e[key] = value
            done[key] = value
    return done
