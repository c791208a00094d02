"""DDP across a stop-free job's generations: the module the training script keeps.

``ElasticDDP`` wraps the script's model; the runtime (``flowcon.elastic.stopfree``) rebuilds
the ``DistributedDataParallel`` inside it at every generation (a new process group, a new
world size). Gradients are averaged by ``weighted_allreduce_hook``, weighted by each rank's
share of the global batch, so uneven shares give the global-batch mean exactly; a failed
collective is recorded in ``_Comm.failed`` for the step boundary to recover from.
``close_group`` tears a generation's group down without gloo's destructor deadlock.
"""

from __future__ import annotations

import contextlib
import inspect
import time
from typing import Any, Final

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

_DDP_INIT_SYNC: Final = "init_sync" in inspect.signature(DistributedDataParallel).parameters


class _Comm:
    """What the DDP communication hook needs: this step's weight, the failure flag, timing."""

    def __init__(self) -> None:
        self.weight = 1.0
        self.failed: BaseException | None = None
        # this step's time that is not the rank's own work (the gradient all-reduce, the
        # checkpoint's gather): there it waits for the slowest rank (EDL 5.2 measures
        # each worker's own time; see ``StopFree.steps``)
        self.seconds = 0.0
        # the group the gradients are averaged over: the generation's NCCL group when each
        # rank has its own GPU, None for the default (gloo) group
        self.group: Any = None


def weighted_allreduce_hook(comm: _Comm, bucket: Any) -> torch.futures.Future[torch.Tensor]:
    """DDP comm hook: ``sum_r (n_r / N) * grad_r``, the global-batch mean when each rank's loss
    is the mean over its ``n_r`` samples (DDP's own hook divides by the world size instead,
    wrong when shares are uneven). A failed all-reduce (a peer died) does not raise into the
    training script's ``backward``: it marks ``comm.failed`` and the step boundary recovers."""
    buf: torch.Tensor = bucket.buffer()
    if comm.weight == 0.0:
        buf.zero_()  # an empty share: its mean loss is NaN, its gradient must count 0
    else:
        buf.mul_(comm.weight)
    if comm.failed is None:
        t0 = time.perf_counter()
        try:
            dist.all_reduce(buf, group=comm.group)
        except Exception as exc:  # a peer died: recover at the boundary
            comm.failed = exc
        comm.seconds += time.perf_counter() - t0
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    fut.set_result(buf)
    return fut


# DDP checks the hook's annotations as objects (this module's are strings)
_GRAD_BUCKET: Any = getattr(dist, "GradBucket")  # noqa: B009 (not in torch's typed exports)
weighted_allreduce_hook.__annotations__.update(
    {"bucket": _GRAD_BUCKET, "comm": _Comm, "return": torch.futures.Future[torch.Tensor]}
)


class ElasticDDP(torch.nn.Module):
    """The module the training script calls: DDP over the current generation's group.

    The runtime rebuilds the ``DistributedDataParallel`` inside at every generation (a new
    process group, a new world size); the script keeps this one object. With one worker the
    plain module runs. The parameters are the wrapped module's (``.module``).
    """

    _ddp: Any
    _comm: _Comm
    _kwargs: dict[str, Any]

    def __init__(self, module: torch.nn.Module, comm: _Comm, **ddp_kwargs: Any) -> None:
        super().__init__()
        self.module = module
        object.__setattr__(self, "_ddp", None)
        object.__setattr__(self, "_comm", comm)
        object.__setattr__(self, "_kwargs", ddp_kwargs)

    def release(self) -> None:
        """Drop the inner DDP (its reducer holds the generation's process group)."""
        object.__setattr__(self, "_ddp", None)

    def rebuild(
        self, world_size: int, device_ids: list[int] | None, process_group: Any = None
    ) -> None:
        self.release()
        if world_size > 1:
            # init_sync=False: the state was replicated already (torch 1.13 has no such
            # option and broadcasts rank 0's parameters once more)
            kwargs = {"init_sync": False, **self._kwargs} if _DDP_INIT_SYNC else self._kwargs
            if process_group is not None:
                kwargs = {**kwargs, "process_group": process_group}
            ddp = DistributedDataParallel(self.module, device_ids=device_ids, **kwargs)
            ddp.register_comm_hook(self._comm, weighted_allreduce_hook)
            object.__setattr__(self, "_ddp", ddp)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        ddp = self._ddp
        if ddp is None or self._comm.failed is not None:
            return self.module(*args, **kwargs)
        try:
            return ddp(*args, **kwargs)
        except Exception as exc:  # a collective in DDP's forward failed: recover at boundary
            self._comm.failed = exc
            return self.module(*args, **kwargs)


def close_group(wrapped: ElasticDDP | None) -> None:
    """Destroy the default process group and release ``wrapped``'s DDP, without a deadlock.

    The DDP's reducer holds the group too. Were the reducer its last holder, dropping the DDP
    would run gloo's destructor with the GIL held; that destructor joins gloo's worker threads,
    and one of them may be freeing a finished collective's tensor whose Python object it must
    decref under the GIL: both wait for ever (pytorch/pytorch#56297; seen in CI: rank 0 of
    a 2 -> 1 scale-in hung in ``ElasticDDP.rebuild``). So the group's own Python object is kept
    until the reducer is gone; dropped last, torch's binding destroys the group with the GIL
    released, and the worker thread finishes.
    """
    group = dist.group.WORLD
    with contextlib.suppress(Exception):
        dist.destroy_process_group()
    if wrapped is not None:
        wrapped.release()
    del group  # the last holder: destroyed with the GIL released
