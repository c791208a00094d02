"""Loading a checkpoint without running code: ``torch.load`` through an unpickler that
resolves only the names tensors and state dicts are rebuilt from.

A checkpoint file sits in a folder the job's containers write, so its bytes are the job's
own code's, and a pickle names any callable to run at load. This unpickler resolves a
global only when it rebuilds a tensor, a parameter or a storage (``torch._utils``'s
``_rebuild_*``, ``torch.*Storage``), names a dtype, or is ``collections.OrderedDict``
(every ``state_dict``); anything else is refused with ``RefusedGlobal`` and nothing of the
file runs. Plain values (numbers, strings, lists, tuples, dicts, None, bools, bytes) need
no global at all. It works alike on the torch releases the runtime meets (1.13 in the
training images, 2.x on hosts), whose own ``weights_only`` mode differs between them
(1.13's refuses Python floats, so an optimizer's state would not load).
"""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import IO, Any

import torch

_REBUILDERS = frozenset(
    {
        "_rebuild_tensor",
        "_rebuild_tensor_v2",
        "_rebuild_tensor_v3",
        "_rebuild_parameter",
        "_rebuild_parameter_with_state",
    }
)
_ALLOWED = frozenset({("collections", "OrderedDict"), ("torch", "Size"), ("torch", "device")})


class RefusedGlobal(pickle.UnpicklingError):
    """The file names a global that no tensor or state dict needs."""


def allowed(module: str, name: str) -> bool:
    """A pickle may name ``module.name``: a tensor rebuilder, a storage, a dtype, a
    state dict's OrderedDict, a size or a device."""
    if (module, name) in _ALLOWED:
        return True
    if module == "torch._utils":
        return name in _REBUILDERS
    if module in ("torch", "torch.storage") and name.endswith("Storage"):
        return True
    return module == "torch" and isinstance(getattr(torch, name, None), torch.dtype)


class Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if not allowed(module, name):
            raise RefusedGlobal(f"global {module}.{name} is not allowed in a checkpoint")
        return super().find_class(module, name)


def load(file: IO[bytes], **kwargs: Any) -> Any:
    """``pickle.load`` with the restricted unpickler (torch's legacy format calls it)."""
    return Unpickler(file, **kwargs).load()


class _Module:
    """What ``torch.load`` takes as ``pickle_module`` (and what torch 1.13's serialization
    reads of the ``pickle`` module during a load)."""

    __name__ = "flowcon.elastic.safe_load"
    Unpickler = Unpickler
    UnpicklingError = pickle.UnpicklingError
    HIGHEST_PROTOCOL = pickle.HIGHEST_PROTOCOL
    load = staticmethod(load)


def _takes_pickle_module() -> bool:
    """torch 2 unpickles with the ``pickle_module`` it is given; 1.13 replaces it with
    ``pickle`` unless ``weights_only`` (which refuses floats there)."""
    major = torch.__version__.split(".", 1)[0]
    return not major.isdigit() or int(major) >= 2


def safe_torch_load(path: Path) -> Any:
    """``torch.load(path)`` on the CPU that resolves only the globals ``allowed`` says;
    ``RefusedGlobal`` for any other, another exception for bytes that are no checkpoint."""
    if _takes_pickle_module():
        return torch.load(path, map_location="cpu", pickle_module=_Module, weights_only=False)
    serialization: Any = torch.serialization
    saved = serialization.pickle
    serialization.pickle = _Module  # what torch 1.13's load takes as its pickle_module
    try:
        return torch.load(path, map_location="cpu")
    finally:
        serialization.pickle = saved
