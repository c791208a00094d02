"""Hybrid batch scaling, the mechanism: current global/local batch and progressive LR scaling.

Elan (shared/papers/elan.txt, section III, Algorithm 1 and equations 1-3): when a scale
event changes the total batch size by a factor ``k`` the learning rate is scaled by ``k`` too
(the linear scaling rule), but not at once, since "a sharp change in the learning rate may
lead the model to divergence": it moves linearly over ``T`` iterations,

    lr_t = lr_0 + (t - T_0) / T * (lr_T - lr_0)   for T_0 <= t < T_0 + T,   lr_T afterwards,

with ``T_0`` the first step of the new batch size, ``lr_0`` the learning rate at that step
and ``lr_T = base_lr * B_new / B_ref`` (``B_ref`` is the global batch ``base_lr`` is meant
for). A change during a ramp starts the next ramp from wherever the learning rate is then.
*When* to change the batch (Algorithm 1, lines 1-17) is the batch-size allocation's
decision, not this module's.

Steps are the 1-based numbers ``Elastic.steps`` yields: call ``set_global_batch(B, step)``
before running ``step``, the first step with the new batch, and ``apply(optimizer, step)`` (or
``lr(step)``) before each step. ``T`` comes from ``FLOWCON_LR_RAMP_STEPS`` (default
``DEFAULT_RAMP_STEPS``). Pure: no torch import; ``apply`` only writes ``param_groups``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Final

from flowcon import contract
from flowcon.elastic.data import share_bounds

DEFAULT_RAMP_STEPS: Final = 100


def ramp_steps_from_env(env: Mapping[str, str] | None = None) -> int:
    """``FLOWCON_LR_RAMP_STEPS`` (an integer >= 0), or ``DEFAULT_RAMP_STEPS`` when unset."""
    e = os.environ if env is None else env
    raw = e.get(contract.ENV_LR_RAMP_STEPS, "").strip()
    if not raw:
        return DEFAULT_RAMP_STEPS
    try:
        value = int(raw)
    except ValueError:
        name = contract.ENV_LR_RAMP_STEPS
        raise ValueError(f"environment {name}={raw!r} is not an integer") from None
    if value < 0:
        raise ValueError(f"environment {contract.ENV_LR_RAMP_STEPS}={raw!r} is negative")
    return value


def reference_batch_from_env(env: Mapping[str, str] | None = None) -> int | None:
    """``FLOWCON_REFERENCE_BATCH_SIZE`` (the executor sets it for a job with a batch range:
    the global batch it was submitted with, which its learning rate is meant for), or None
    when unset."""
    e = os.environ if env is None else env
    raw = e.get(contract.ENV_REFERENCE_BATCH_SIZE, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        name = contract.ENV_REFERENCE_BATCH_SIZE
        raise ValueError(f"environment {name}={raw!r} is not a positive integer")
    return value


class HybridScaling:
    """The job's global batch and its learning rate under Elan's progressive linear scaling.

    ``factor(step)`` is the multiplier of ``base_lr``: ``global_batch / reference_batch`` once a
    ramp is over. ``reference_batch`` (the batch ``base_lr`` is meant for) defaults to
    FLOWCON_REFERENCE_BATCH_SIZE when set (a job with a batch range may start at another
    batch than it was submitted with), else to ``global_batch``. Use ``lr(step)`` /
    ``apply(optimizer, step)`` directly, or multiply your own schedule by ``factor(step)``
    (e.g. inside a ``LambdaLR`` lambda).
    """

    def __init__(
        self,
        base_lr: float,
        global_batch: int,
        *,
        reference_batch: int | None = None,
        ramp_steps: int | None = None,
    ) -> None:
        if global_batch < 1:
            raise ValueError(f"global batch must be positive, got {global_batch}")
        if reference_batch is None:  # the submitted batch when the job has a range
            reference_batch = reference_batch_from_env() or global_batch
        ref = reference_batch
        if ref < 1:
            raise ValueError(f"reference batch must be positive, got {ref}")
        steps = ramp_steps_from_env() if ramp_steps is None else ramp_steps
        if steps < 0:
            raise ValueError(f"ramp steps must be >= 0, got {steps}")
        self.base_lr = float(base_lr)
        self.reference_batch = ref
        self.ramp_steps = steps
        self._global_batch = global_batch
        target = global_batch / ref
        # the ramp in progress: from _from at step _start to _to at _start + ramp_steps
        self._from = target
        self._to = target
        self._start = 0

    # -- batches

    @property
    def global_batch(self) -> int:
        return self._global_batch

    def local_batch(self, rank: int, world_size: int) -> int:
        """Rank ``rank``'s share of the global batch (shares differ by at most one; the same
        split as ``ElasticSampler.batch`` and ``ElasticEnv.local_batch_size``)."""
        lo, hi = share_bounds(self._global_batch, rank, world_size)
        return hi - lo

    def set_global_batch(self, global_batch: int, step: int) -> None:
        """The global batch is ``global_batch`` from ``step`` on; the LR ramp starts there.

        Setting the current value again changes nothing (a running ramp goes on).
        """
        if global_batch < 1:
            raise ValueError(f"global batch must be positive, got {global_batch}")
        if global_batch == self._global_batch:
            return
        self._from = self.factor(step)
        self._to = global_batch / self.reference_batch
        self._start = step
        self._global_batch = global_batch

    # -- learning rate

    @property
    def ramping_until(self) -> int:
        """The first step at which the learning rate is at its target."""
        return self._start + self.ramp_steps

    def factor(self, step: int) -> float:
        """The multiplier of ``base_lr`` for ``step`` (equation 3 of Elan, in units of base_lr)."""
        if self.ramp_steps == 0 or step >= self._start + self.ramp_steps:
            return self._to
        if step <= self._start:
            return self._from
        return self._from + (step - self._start) / self.ramp_steps * (self._to - self._from)

    def lr(self, step: int) -> float:
        return self.base_lr * self.factor(step)

    def apply(self, optimizer: Any, step: int) -> float:
        """Set every parameter group's ``lr`` to ``lr(step)``; returns it. For per-group rates
        or an LR schedule multiply those by ``factor(step)`` instead."""
        value = self.lr(step)
        for group in optimizer.param_groups:
            group["lr"] = value
        return value

    # -- state (replicated with the training state: flowcon.elastic.state)

    def state_dict(self) -> dict[str, Any]:
        return {
            "base_lr": self.base_lr,
            "reference_batch": self.reference_batch,
            "ramp_steps": self.ramp_steps,
            "global_batch": self._global_batch,
            "from": self._from,
            "to": self._to,
            "start": self._start,
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.base_lr = float(state["base_lr"])
        self.reference_batch = int(state["reference_batch"])
        self.ramp_steps = int(state["ramp_steps"])
        self._global_batch = int(state["global_batch"])
        self._from = float(state["from"])
        self._to = float(state["to"])
        self._start = int(state["start"])

    def __repr__(self) -> str:
        return (
            f"HybridScaling(base_lr={self.base_lr}, global_batch={self._global_batch}, "
            f"reference_batch={self.reference_batch}, ramp_steps={self.ramp_steps})"
        )
