"""Topology-aware placement with buddy allocation (ElasticFlow section 4.3).

GPUs are numbered node-major (global index = node * gpus_per_node + gpu). A job of 2^k GPUs
gets an aligned block of 2^k consecutive indices: inside one node when 2^k <= GPUs per node,
whole neighbouring nodes otherwise, so its workers are as close as the topology allows.
Among free aligned blocks, Best-Fit picks the one whose buddy (the enclosing block of twice
the size) has the fewest idle GPUs. Jobs whose size did not change stay where they are. If no
block is free although enough GPUs are idle, everything is re-packed largest-first, which with
power-of-two sizes always succeeds (no fragmentation); the jobs that had to move are
migrated. Each rescaled or migrated job is charged ``overhead`` seconds of lost progress.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from flowcon.alloc.model import Topology, is_power_of_two

Placement = tuple[tuple[int, int], ...]  # ((node_index, gpu_index), ...)


@dataclass(frozen=True)
class PlacementPlan:
    placements: dict[str, Placement]
    rescaled: frozenset[str] = frozenset()  # GPU count changed (incl. started / paused)
    migrated: frozenset[str] = frozenset()  # same count, different GPUs
    overhead: dict[str, float] = field(default_factory=dict)  # seconds charged per job
    repacked: bool = False

    @property
    def changed(self) -> frozenset[str]:
        return self.rescaled | self.migrated


class PlacementError(ValueError):
    pass


class BuddyPlacer:
    def __init__(self, topology: Topology, overhead: float = 0.0) -> None:
        if not is_power_of_two(topology.gpus_per_node):
            raise PlacementError("buddy placement needs a power-of-two GPU count per node")
        self.topology = topology
        self.overhead = float(overhead)
        self.total = topology.total_gpus

    def _gid(self, ng: tuple[int, int]) -> int:
        return ng[0] * self.topology.gpus_per_node + ng[1]

    def _placement(self, offset: int, size: int) -> Placement:
        g = self.topology.gpus_per_node
        return tuple(((offset + i) // g, (offset + i) % g) for i in range(size))

    def _aligned_offset(self, p: Placement) -> int | None:
        """Start index if ``p`` is an aligned buddy block, else None."""
        ids = sorted(self._gid(x) for x in p)
        size = len(ids)
        if not ids or not is_power_of_two(size) or ids[0] % size:
            return None
        if ids != list(range(ids[0], ids[0] + size)) or ids[-1] >= self.total:
            return None
        return ids[0]

    def _best_fit(self, free: npt.NDArray[np.bool_], size: int) -> int | None:
        usable = (self.total // size) * size
        if usable == 0:
            return None
        blocks = free[:usable].reshape(-1, size).all(axis=1)
        cand = np.flatnonzero(blocks)
        if len(cand) == 0:
            return None
        parent = min(2 * size, self.total)
        counts = free[: (self.total // parent) * parent].reshape(-1, parent).sum(axis=1)
        starts = cand * size
        pidx = starts // parent
        score = np.where(pidx < len(counts), counts[np.minimum(pidx, len(counts) - 1)], size)
        return int(starts[int(np.argmin(score))])

    def place(
        self, allocation: Mapping[str, int], current: Mapping[str, Placement]
    ) -> PlacementPlan:
        sizes = {j: int(n) for j, n in allocation.items() if n > 0}
        for j, n in sizes.items():
            if not is_power_of_two(n):
                raise PlacementError(f"job {j}: {n} GPUs is not a power of two")
        if sum(sizes.values()) > self.total:
            raise PlacementError(f"{sum(sizes.values())} GPUs requested, {self.total} exist")
        free = np.ones(self.total, dtype=np.bool_)
        offsets: dict[str, int] = {}
        todo: list[str] = []
        for j, n in sizes.items():
            cur = current.get(j)
            off = self._aligned_offset(cur) if cur and len(cur) == n else None
            if off is not None and free[off : off + n].all():
                free[off : off + n] = False
                offsets[j] = off
            else:
                todo.append(j)
        todo.sort(key=lambda j: (-sizes[j], j))
        placed = self._fit(free, offsets, todo, sizes)
        repacked = False
        if placed is None:
            # Defragment: largest first, each job staying put when its block is still free.
            placed = self._fit(
                np.ones(self.total, dtype=np.bool_),
                {},
                sorted(sizes, key=lambda j: (-sizes[j], self._first(current.get(j)), j)),
                sizes,
                current,
            )
            repacked = True
        offsets = placed if placed is not None else self._repack(sizes, current)
        placements = {j: self._placement(offsets[j], n) for j, n in sizes.items()}
        rescaled = {
            j for j in set(sizes) | set(current) if len(current.get(j, ())) != sizes.get(j, 0)
        }
        migrated = {
            j for j in sizes if j not in rescaled and set(current.get(j, ())) != set(placements[j])
        }
        charged = {j: self.overhead for j in rescaled | migrated if j in sizes}
        return PlacementPlan(
            placements, frozenset(rescaled), frozenset(migrated), charged, repacked
        )

    def _fit(
        self,
        free: npt.NDArray[np.bool_],
        offsets: dict[str, int],
        order: list[str],
        sizes: Mapping[str, int],
        current: Mapping[str, Placement] | None = None,
    ) -> dict[str, int] | None:
        offsets = dict(offsets)
        for j in order:
            n = sizes[j]
            cur = current.get(j) if current is not None else None
            off = self._aligned_offset(cur) if cur and len(cur) == n else None
            if off is None or not free[off : off + n].all():
                off = self._best_fit(free, n)
            if off is None:
                return None
            free[off : off + n] = False
            offsets[j] = off
        return offsets

    def _repack(self, sizes: Mapping[str, int], current: Mapping[str, Placement]) -> dict[str, int]:
        """Largest-first contiguous packing; among equal sizes, keep jobs that already sit at
        the offset they would get so fewer of them move."""
        order = sorted(sizes, key=lambda j: (-sizes[j], self._first(current.get(j)), j))
        offsets: dict[str, int] = {}
        pos = 0
        for j in order:
            offsets[j] = pos
            pos += sizes[j]
        return offsets

    def _first(self, p: Placement | None) -> int:
        return min((self._gid(x) for x in p), default=self.total) if p else self.total
