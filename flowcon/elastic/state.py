"""The whole training state of one worker, as one dict of tensors and plain values, and back.

Elan (shared/papers/elan.txt, section IV.1, Table II) lists what a data-parallel job's
state is: model, optimizer, data loading position and runtime information (epoch,
iteration); to resume *exactly* the LR scheduler, the AMP GradScaler and the random number
generators belong to it too. ``capture`` builds the dict and ``restore``
puts it back; the same dict is what a checkpoint file holds (``Elastic.checkpoint``) and what
stop-free replication sends to joining workers over the network.

Keys (all optional but ``format`` and ``step``; missing ones are skipped on restore, so a
checkpoint written before this module, ``{"step", "model", "optimizer"}``, still loads):

``format`` (1), ``step``, ``model``, ``optimizer``, ``scheduler``, ``scaler``, ``sampler``,
``batch_scaling`` (``flowcon.elastic.lr.HybridScaling``), ``rng`` (``python``, ``torch``,
``cuda`` when CUDA is initialised: the generator of the worker's current device, with
``cuda_device``, its index then; ``numpy`` when numpy is loaded), ``extra`` (the caller's).

Every value is a tensor or a plain Python value (numbers, strings, None, lists, tuples,
dicts; numpy's generator state as a list), so a checkpoint file loads with
``torch.load(weights_only=True)``, which executes no code (``flowcon.elastic.restart.
load_checkpoint``). Anything with ``state_dict()`` / ``load_state_dict()`` returning such
values may be passed as scheduler, scaler, sampler or batch_scaling. numpy is never
imported here unless a state to restore holds its generator state, so ``flowcon.elastic``
needs torch only.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Mapping
from typing import Any, Final, Protocol

import torch

FORMAT: Final = 1


class Stateful(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any, /) -> Any: ...


def unwrap(model: torch.nn.Module) -> torch.nn.Module:
    """The module inside DistributedDataParallel (or the module itself)."""
    inner = getattr(model, "module", model)
    return inner if isinstance(inner, torch.nn.Module) else model


def clone(obj: Any) -> Any:
    """A copy of ``obj`` whose tensors share no storage with the live ones.

    ``state_dict()`` returns the live parameter and optimizer tensors; an in-memory snapshot
    kept while training goes on must copy them.
    """
    if isinstance(obj, torch.Tensor):
        return obj.detach().clone()
    if isinstance(obj, dict):
        return {k: clone(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [clone(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(clone(v) for v in obj)
    return obj


# ---------------------------------------------------------------- random number generators


def rng_state() -> dict[str, Any]:
    """The generators a training step may draw from: python, torch CPU, CUDA, numpy.

    CUDA's states are taken only when CUDA is already initialised (taking them would
    initialise it); numpy's only when numpy is already imported (a generator nobody imported
    was never drawn from).
    """
    out: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():  # type: ignore[no-untyped-call]
        # the generator of the device this worker trains on: the rank's stream, whatever
        # GPU index it has after a restart (the others' would create a context on each GPU)
        current = torch.cuda.current_device()
        out["cuda"] = [torch.cuda.get_rng_state(current)]
        out["cuda_device"] = current
    np = sys.modules.get("numpy")
    if np is not None:  # plain values, no array: a checkpoint loads with weights_only
        name, key, pos, has_gauss, cached = np.random.get_state()
        out["numpy"] = [str(name), [int(k) for k in key], int(pos), int(has_gauss), float(cached)]
    return out


def set_rng_state(state: Mapping[str, Any]) -> None:
    """Put back what ``rng_state`` took (the parts this process can use)."""
    if "python" in state:
        random.setstate(_as_python_state(state["python"]))
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        saved = list(state["cuda"])
        if "cuda_device" in state and saved:
            # this rank's own stream, onto the device it trains on now (the index may differ)
            torch.cuda.set_rng_state(saved[0], torch.cuda.current_device())
        else:  # an older state: every device's generator, as many as both sides have
            torch.cuda.set_rng_state_all(saved[: torch.cuda.device_count()])
    if "numpy" in state:
        try:
            import numpy as np
        except ImportError:  # the state came from a process with numpy; this one has none
            return
        name, key, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(key, dtype=np.uint32), pos, has_gauss, cached))


def _as_python_state(state: Any) -> tuple[Any, ...]:
    """``random.setstate`` wants tuples; a state that went through a list-making codec has
    lists (version, internal state, gauss_next)."""
    version, internal, gauss = state
    return (version, tuple(internal), gauss)


# ---------------------------------------------------------------- capture / restore


def capture(
    model: torch.nn.Module,
    optimizer: Any,
    *,
    step: int,
    scheduler: Stateful | None = None,
    scaler: Stateful | None = None,
    sampler: Stateful | None = None,
    extra: Mapping[str, Any] | None = None,
    batch_scaling: Stateful | None = None,
    copy: bool = True,
) -> dict[str, Any]:
    """Everything needed to resume at ``step`` (the number of steps done).

    ``copy=True`` (the default) detaches and clones every tensor, so the dict is a snapshot
    that later training does not change; ``copy=False`` is for a dict serialised at once
    (a checkpoint file). Tensors stay on their device.
    """
    take = clone if copy else _same
    state: dict[str, Any] = {
        "format": FORMAT,
        "step": int(step),
        "model": take(unwrap(model).state_dict()),
        "optimizer": take(optimizer.state_dict()) if optimizer is not None else None,
        "rng": rng_state(),
    }
    for key, obj in (
        ("scheduler", scheduler),
        ("scaler", scaler),
        ("sampler", sampler),
        ("batch_scaling", batch_scaling),
    ):
        if obj is not None:
            state[key] = take(obj.state_dict())
    if extra is not None:
        state["extra"] = take(dict(extra))
    return state


def restore(
    state: Mapping[str, Any],
    model: torch.nn.Module,
    optimizer: Any,
    scheduler: Stateful | None = None,
    scaler: Stateful | None = None,
    sampler: Stateful | None = None,
    *,
    batch_scaling: Stateful | None = None,
    rng: bool = True,
    copy: bool = True,
) -> int:
    """Load ``state`` (from ``capture`` or a checkpoint file) into the objects; returns the step.

    Objects passed as None, and keys the state lacks, are left alone. ``rng=False`` keeps
    this process's generators (e.g. when each rank restores its own elsewhere).

    ``copy=True`` (the default) leaves ``state`` untouched by later training, so one snapshot
    can be restored again: ``Optimizer.load_state_dict`` keeps the tensors it is given when
    their device and dtype already fit (the momentum buffers would then be the snapshot's and
    change with every step). ``copy=False`` for a state used once (read from a file).
    """
    if state.get("format", FORMAT) > FORMAT:
        raise ValueError(f"training state format {state['format']} is newer than {FORMAT}")
    take = clone if copy else _same
    if state.get("model") is not None:  # load_state_dict copies into the parameters
        unwrap(model).load_state_dict(state["model"])
    if optimizer is not None and state.get("optimizer") is not None:
        optimizer.load_state_dict(take(state["optimizer"]))
    if scheduler is not None and state.get("scheduler") is not None:
        scheduler.load_state_dict(take(state["scheduler"]))
    # a GradScaler saved disabled has an empty state, which an enabled one refuses
    if scaler is not None and state.get("scaler"):
        scaler.load_state_dict(take(state["scaler"]))
    if sampler is not None and state.get("sampler") is not None:
        sampler.load_state_dict(take(state["sampler"]))
    if batch_scaling is not None and state.get("batch_scaling") is not None:
        batch_scaling.load_state_dict(take(state["batch_scaling"]))
    if rng and state.get("rng") is not None:
        set_rng_state(state["rng"])
    return int(state["step"])


def _same(obj: Any) -> Any:
    return obj
