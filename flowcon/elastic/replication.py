"""Stop-free state replication: the running ranks' state to the joiners, no file.

At a scale-out switch (``flowcon.elastic.stopfree``) the training state
(``flowcon.elastic.state.capture``) goes from the ranks that hold it to the new ones by
broadcast over the new process group: Elan's IO-free replication (section IV), its tensors
spread over several holders (concurrent replication). ``flatten`` / ``unflatten`` pack the
state's tensors into one flat buffer per dtype and back; ``chunks`` cuts a buffer among the
senders.

Tensors stay where they are: a tensor on a GPU is packed into a buffer on that GPU and
unpacked on the receiver's GPU (keys ``float32@gpu``), the CPU ones (an optimizer's step
counts) into host buffers (``float32``). The GPU buffers go over ``group`` (the
generation's NCCL group when each rank has its own GPU, else the default gloo group, which
takes CUDA tensors), the host ones over the default group: no copy through host memory
on the sending or the receiving side when both ends are GPUs.

When fewer senders than holders are wanted, the senders are the holders nearest the
joiners (``nearest_sources``): on the joiners' own node first, by the ``FLOWCON_NODE`` and
``FLOWCON_GPUS`` every container is given (docs/elastic.md, the executor <-> job contract),
so the state crosses the network only where no holder shares a node with a joiner.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class _TensorRef:
    """Where a tensor of the replicated state lives in the flat per-dtype buffers."""

    dtype: str  # the buffer's key: the dtype, "@gpu" for a buffer on the device
    offset: int
    shape: tuple[int, ...]


ON_DEVICE = "@gpu"


def buffer_key(t: torch.Tensor) -> str:
    """The flat buffer a tensor goes to: by dtype, and whether it lives on the host."""
    key = str(t.dtype).removeprefix("torch.")
    return key if t.device.type == "cpu" else key + ON_DEVICE


def buffer_dtype(key: str) -> torch.dtype:
    dtype: torch.dtype = getattr(torch, key.removesuffix(ON_DEVICE))
    return dtype


def flatten(obj: Any, buffers: dict[str, list[torch.Tensor]], sizes: dict[str, int]) -> Any:
    """``obj`` with every tensor replaced by a :class:`_TensorRef` into ``buffers``
    (each tensor stays on its device)."""
    if isinstance(obj, torch.Tensor):
        key = buffer_key(obj)
        t = obj.detach().reshape(-1)
        off = sizes.get(key, 0)
        buffers.setdefault(key, []).append(t)
        sizes[key] = off + t.numel()
        return _TensorRef(key, off, tuple(obj.shape))
    if isinstance(obj, dict):
        return {k: flatten(v, buffers, sizes) for k, v in obj.items()}
    if isinstance(obj, list):
        return [flatten(v, buffers, sizes) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(flatten(v, buffers, sizes) for v in obj)
    return obj


def unflatten(obj: Any, flat: Mapping[str, torch.Tensor]) -> Any:
    """The inverse of :func:`flatten` (tensors are views into ``flat``)."""
    if isinstance(obj, _TensorRef):
        n = 1
        for d in obj.shape:
            n *= d
        return flat[obj.dtype][obj.offset : obj.offset + n].view(obj.shape)
    if isinstance(obj, dict):
        return {k: unflatten(v, flat) for k, v in obj.items()}
    if isinstance(obj, list):
        return [unflatten(v, flat) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(unflatten(v, flat) for v in obj)
    return obj


def chunks(n: int, parts: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` pieces of ``range(n)`` for ``parts`` senders (sizes differ by at most one)."""
    parts = max(1, min(parts, n)) if n else 1
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


Location = tuple[str, str]  # (node name, this container's GPU ids): where a rank runs


def worker_location(env: Mapping[str, str]) -> Location | None:
    """Where this rank runs, from its container's environment; None where not told."""
    node = env.get("FLOWCON_NODE", "")
    return (node, env.get("FLOWCON_GPUS", "")) if node else None


def nearest_sources(where: Sequence[Location | None], holders: int, count: int) -> list[int]:
    """``count`` holder ranks (of ``0 .. holders-1``) to send the state from, nearest the
    joiners (ranks ``holders ..``) first: a holder is nearer the fewer joiners are on other
    nodes than it, then the fewer are outside its container (one container holds the ranks
    of one node's GPUs; its GPUs are the closest); ties, and ranks whose place is unknown,
    by rank. ``where[r]``: rank ``r``'s ``worker_location``."""
    count = max(1, min(count, holders))
    joiners = [w for w in where[holders:] if w is not None]

    def far(rank: int) -> tuple[int, int, int]:
        here = where[rank] if rank < len(where) else None
        if here is None or not joiners:
            return (len(joiners), len(joiners), rank)
        other_node = sum(1 for j in joiners if j[0] != here[0])
        other_box = sum(1 for j in joiners if j != here)
        return (other_node, other_box, rank)

    return sorted(sorted(range(holders), key=far)[:count])


def _senders(holders: int, sources: int) -> list[int]:
    """The holder ranks that send, nearest the joiners (one small all-gather of every
    rank's place, made only when there is a choice: fewer senders than holders)."""
    senders = max(1, min(sources, holders))
    world = dist.get_world_size()
    if senders >= holders or world <= holders:
        return list(range(senders))
    places: list[Any] = [None] * world
    dist.all_gather_object(places, worker_location(os.environ))
    return nearest_sources(places, holders, senders)


def replicate(
    state: dict[str, Any] | None,
    holders: int,
    sources: int = 1,
    device: torch.device | None = None,
    group: Any = None,
) -> dict[str, Any]:
    """Every rank of the current group ends with rank 0's ``state`` (Elan section IV).

    The small part (step, sampler, scheduler, RNG, ...) and the tensors' layout go from rank 0
    by ``broadcast_object_list``; the model and optimizer tensors are packed into one flat
    buffer per dtype, cut into ``min(sources, holders)`` pieces, and piece ``i`` is broadcast
    from the ``i``-th of the holders nearest the joiners (``nearest_sources``; all holders
    have identical model and optimizer), concurrently.
    Ranks ``< holders`` pass their state; the others pass None. ``device``: where this
    rank keeps the tensors that live on a GPU (its training device; None: the CPU);
    ``group``: the group those go over (None: the default group).
    """
    rank = dist.get_rank()
    buffers: dict[str, list[torch.Tensor]] = {}
    sizes: dict[str, int] = {}
    skeleton: dict[str, Any] | None = None
    if state is not None:
        tensors = {k: state.get(k) for k in ("model", "optimizer")}
        skeleton = {k: v for k, v in state.items() if k not in tensors}
        skeleton["_flat"] = flatten(tensors, buffers, sizes)
        skeleton["_sizes"] = dict(sizes)
    box: list[Any] = [skeleton if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    skel: dict[str, Any] = box[0]
    gpu = device if device is not None else torch.device("cpu")
    if state is not None:
        flat = {k: torch.cat(buffers[k]) for k in skel["_sizes"]}
    else:
        flat = {
            k: torch.empty(n, dtype=buffer_dtype(k), device=gpu if k.endswith(ON_DEVICE) else "cpu")
            for k, n in skel["_sizes"].items()
        }
    works = []
    senders = _senders(holders, sources)
    for key in sorted(flat):
        over = group if key.endswith(ON_DEVICE) else None
        for src, (lo, hi) in zip(senders, chunks(flat[key].numel(), len(senders)), strict=False):
            if hi > lo:
                works.append(dist.broadcast(flat[key][lo:hi], src=src, group=over, async_op=True))
    for w in works:
        if w is not None:
            w.wait()
    out = {k: v for k, v in skel.items() if k not in ("_flat", "_sizes")}
    out.update(unflatten(skel["_flat"], flat))
    return out
