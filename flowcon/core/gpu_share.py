"""GPU shares for containers that share one GPU under CUDA MPS: what each gets, and when a
change is worth a restart.

The containers on one GPU get GPU shares from the same lists as their CPU (Algorithm 1's
limits L, flowcon/core/list_limits.py): a tenant's share of the GPU is its L over the sum
of the L of the GPU's tenants. MPS applies a share per client, at the client's start
(``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``: the SMs its kernels may use; and a pinned device
memory limit, ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT``), so a new share costs the tenant a
checkpoint-restart. The rule, per GPU:

- ``percentage``: ``round(100 * L / sum L)``, at least ``min_pct``, at most 100 (one tenant
  alone: 100);
- memory limit: the tenant's measured device memory times ``headroom``, at least
  ``mem_floor`` bytes, at most the GPU's memory, in whole MiB (a limit below what it uses
  would fail its allocations);
- predicted gain: a GPU-bound tenant's progress rate is taken as proportional to the SMs
  it gets, at the rate its growth efficiency G says. It gets its percentage where the
  percentages add up to 100 or less, and its part of the contention otherwise
  (``pct_i * 100 / sum pct``: two tenants without a limit get half each), so the GPU's
  useful rate is ``sum G_i * effective_i``; the gain over ``horizon_s`` (the agent's
  itval: until the next decision) is ``horizon_s * (new - now) / now`` seconds of the
  current rate;
- cost: the measured restart cost (last step line before a restart to the first after) of
  every tenant whose percentage or memory limit changes; unknown ones count
  ``default_cost_s``;
- apply only when the gain exceeds the cost (and some share changes).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

MIB = 1 << 20


@dataclass(frozen=True)
class Tenant:
    """One container using the GPU, as the agent sees it this round."""

    cid: str
    limit: float  # Algorithm 1's L (a share of the host), the same lists as CPU
    g: float  # its normalized growth efficiency
    mem_bytes: int  # device memory it uses now (NVML)
    pct: int | None = None  # the active thread percentage it runs with (None: 100)
    mem_limit: int | None = None  # the pinned memory limit it runs with (None: none)
    restart_cost_s: float | None = None  # measured; None: not measured yet


@dataclass(frozen=True)
class Share:
    pct: int  # CUDA_MPS_ACTIVE_THREAD_PERCENTAGE
    mem_limit: int  # bytes, for CUDA_MPS_PINNED_DEVICE_MEM_LIMIT


@dataclass(frozen=True)
class Decision:
    apply: bool
    shares: Mapping[str, Share]
    gain_s: float
    cost_s: float
    reason: str


def percentages(limits: Mapping[str, float], min_pct: int = 5) -> dict[str, int]:
    """Each tenant's active thread percentage from its L (its share of the sum)."""
    total = sum(max(0.0, v) for v in limits.values())
    if len(limits) == 1 or total <= 0:
        return dict.fromkeys(limits, 100)
    return {
        cid: max(min_pct, min(100, round(100 * max(0.0, v) / total))) for cid, v in limits.items()
    }


def memory_limit(used: int, gpu_total: int, headroom: float = 1.25, floor: int = 1024 * MIB) -> int:
    """A pinned device memory limit that leaves the tenant room (whole MiB)."""
    want = max(floor, math.ceil(used * headroom))
    return min(gpu_total, math.ceil(want / MIB) * MIB) if gpu_total > 0 else want


def env(share: Share, ordinals: Sequence[int] = (0,)) -> dict[str, str]:
    """The client's environment for ``share`` (the GPU ordinals as the client sees them)."""
    mem = ",".join(f"{o}={share.mem_limit // MIB}M" for o in ordinals)
    return {
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": str(share.pct),
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": mem,
    }


def effective(pct: Mapping[str, int]) -> dict[str, float]:
    """The SM percentage each tenant gets when all are busy: its own where they fit in
    100, else its part of the contention."""
    total = sum(pct.values())
    scale = min(1.0, 100.0 / total) if total > 0 else 1.0
    return {cid: p * scale for cid, p in pct.items()}


def _rate(tenants: Sequence[Tenant], pct: Mapping[str, int]) -> float:
    got = effective(pct)
    return sum(max(0.0, t.g) * got[t.cid] for t in tenants)


def decide(
    tenants: Sequence[Tenant],
    gpu_total: int,
    horizon_s: float,
    default_cost_s: float,
    min_pct: int = 5,
) -> Decision:
    """The shares of one GPU's tenants, and whether changing to them pays for the restarts."""
    want = percentages({t.cid: t.limit for t in tenants}, min_pct)
    shares = {t.cid: Share(want[t.cid], memory_limit(t.mem_bytes, gpu_total)) for t in tenants}
    now = {t.cid: t.pct if t.pct is not None else 100 for t in tenants}
    changed = [
        t
        for t in tenants
        if now[t.cid] != shares[t.cid].pct or t.mem_limit != shares[t.cid].mem_limit
    ]
    if not changed:
        return Decision(False, shares, 0.0, 0.0, "shares unchanged")
    before, after = _rate(tenants, now), _rate(tenants, want)
    if before <= 0:
        gain = horizon_s if after > 0 else 0.0
    else:
        gain = horizon_s * (after - before) / before
    cost = sum(
        t.restart_cost_s if t.restart_cost_s is not None else default_cost_s for t in changed
    )
    if gain > cost:
        return Decision(True, shares, gain, cost, "predicted gain exceeds the restart cost")
    return Decision(False, shares, gain, cost, "predicted gain does not pay for the restarts")
