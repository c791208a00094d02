"""Stop-free state replication: the running ranks' state to the joiners, no file.

At a scale-out switch (``flowcon.elastic.stopfree``) the training state
(``flowcon.elastic.state.capture``) goes from the ranks that hold it to the new ones by
broadcast over the new process group: Elan's IO-free replication (section IV), its tensors
spread over several holders (concurrent replication). ``flatten`` / ``unflatten`` pack the
state's tensors into one flat buffer per dtype and back; ``chunks`` cuts a buffer among the
senders.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class _TensorRef:
    """Where a tensor of the replicated state lives in the flat per-dtype buffers."""

    dtype: str
    offset: int
    shape: tuple[int, ...]


def flatten(obj: Any, buffers: dict[str, list[torch.Tensor]], sizes: dict[str, int]) -> Any:
    """``obj`` with every tensor replaced by a :class:`_TensorRef` into ``buffers``."""
    if isinstance(obj, torch.Tensor):
        key = str(obj.dtype).removeprefix("torch.")
        t = obj.detach().reshape(-1).cpu()  # gloo moves host memory; restore puts it back
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


def replicate(state: dict[str, Any] | None, holders: int, sources: int = 1) -> dict[str, Any]:
    """Every rank of the current group ends with rank 0's ``state`` (Elan section IV).

    The small part (step, sampler, scheduler, RNG, ...) and the tensors' layout go from rank 0
    by ``broadcast_object_list``; the model and optimizer tensors are packed into one flat
    buffer per dtype, cut into ``min(sources, holders)`` pieces, and piece ``i`` is broadcast
    from holder rank ``i`` (all holders have identical model and optimizer), concurrently.
    Ranks ``< holders`` pass their state; the others pass None.
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
    dtypes: dict[str, torch.dtype] = {k: getattr(torch, k) for k in skel["_sizes"]}
    if state is not None:
        flat = {k: torch.cat(buffers[k]) for k in skel["_sizes"]}
    else:
        flat = {k: torch.empty(n, dtype=dtypes[k]) for k, n in skel["_sizes"].items()}
    works = []
    senders = max(1, min(sources, holders))
    for key in sorted(flat):
        for src, (lo, hi) in enumerate(chunks(flat[key].numel(), senders)):
            if hi > lo:
                works.append(dist.broadcast(flat[key][lo:hi], src=src, async_op=True))
    for w in works:
        if w is not None:
            w.wait()
    out = {k: v for k, v in skel.items() if k not in ("_flat", "_sizes")}
    out.update(unflatten(skel["_flat"], flat))
    return out
