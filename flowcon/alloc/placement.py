"""Topology-aware placement with buddy allocation (ElasticFlow section 4.3).

GPUs are numbered node-major (global index = node * gpus_per_node + gpu). A job of 2^k GPUs
gets an aligned block of 2^k consecutive indices: inside one node when 2^k <= GPUs per node,
whole neighbouring nodes otherwise, so its workers are as close as the topology allows.

Jobs whose size did not change stay where they are. The others are placed largest first;
among free aligned blocks, Best-Fit picks the one whose buddy (the enclosing block of twice
the size) has the fewest idle GPUs. Only when no aligned block is free although enough GPUs
are idle (fragmentation) are jobs moved, and only the ones in the way: the block chosen is
the one whose evacuation moves the fewest jobs that would otherwise stay (then the fewest
GPUs). Aligned power-of-two blocks nest, so such a block never cuts a bigger job, the
evicted jobs are all smaller and are placed again the same way; with power-of-two sizes this
always succeeds when the GPUs suffice. Each rescaled or migrated job is charged ``overhead``
seconds of lost progress.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import cast

from flowcon.alloc.model import Topology, is_power_of_two

Placement = tuple[tuple[int, int], ...]  # ((node_index, gpu_index), ...)


@dataclass(frozen=True)
class PlacementPlan:
    placements: dict[str, Placement]
    rescaled: frozenset[str] = frozenset()  # GPU count changed (incl. started / paused)
    migrated: frozenset[str] = frozenset()  # same count, different GPUs
    overhead: dict[str, float] = field(default_factory=dict)  # seconds charged per job
    repacked: bool = False  # some job had to move to make room (defragmentation)

    @property
    def changed(self) -> frozenset[str]:
        return self.rescaled | self.migrated


class PlacementError(ValueError):
    pass


class _Grid:
    """Who holds each GPU, and idle GPUs per aligned block of every power-of-two size."""

    def __init__(self, owner: list[str | None]) -> None:
        total = len(owner)
        self.total = total
        self.owner = owner
        # idle[size][b]: idle GPUs in block [b*size, (b+1)*size) (complete blocks only),
        # built bottom-up once; later changes are applied incrementally by ``set``
        level = [1 if x is None else 0 for x in owner]
        self.idle: dict[int, list[int]] = {1: level}
        s = 2
        while s <= total:
            level = [level[i] + level[i + 1] for i in range(0, len(level) - 1, 2)]
            self.idle[s] = level
            s *= 2

    def set(self, off: int, n: int, job: str | None) -> None:
        self.owner[off : off + n] = [job] * n
        delta = n if job is None else -n
        for s, counts in self.idle.items():
            if s <= n:
                value = s if job is None else 0
                first = off // s
                counts[first : first + n // s] = [value] * (n // s)
            else:
                b = off // s
                if b < len(counts):
                    counts[b] += delta

    def best_fit(self, n: int) -> int | None:
        """Offset of a free aligned n-block in the fullest enclosing blocks: fewest idle
        GPUs in its buddy, then in the next larger enclosing block, and so on."""
        counts = self.idle.get(n)
        if not counts:
            return None
        # the free blocks, each found by counts.index in C (cluster04: about 35 free
        # one-GPU blocks of 1,024 at a time, five or fewer of 8 GPUs or more)
        cands: list[int] = []
        find = counts.index
        try:
            b = find(n)
            while True:
                cands.append(b)
                b = find(n, b + 1)
        except ValueError:
            if not cands:
                return None
        s = 2 * n
        while len(cands) > 1 and s in self.idle:
            parent = self.idle[s]
            shift = (s // n).bit_length() - 1
            scores = [parent[b >> shift] if (b >> shift) < len(parent) else s for b in cands]
            low = min(scores)
            cands = [b for b, sc in zip(cands, scores, strict=True) if sc == low]
            s *= 2
        return cands[0] * n


# (placements returned, the grid they leave, offset per job)
_State = tuple[dict[str, Placement], _Grid, dict[str, int]]


class BuddyPlacer:
    def __init__(self, topology: Topology, overhead: float = 0.0) -> None:
        if not is_power_of_two(topology.gpus_per_node):
            raise PlacementError("buddy placement needs a power-of-two GPU count per node")
        self.topology = topology
        self.overhead = float(overhead)
        self.total = topology.total_gpus
        self._blocks: dict[tuple[int, int], Placement] = {}  # (offset, size) -> placement
        self._last: _State | None = None  # our previous answer, its grid and offsets

    def _placement(self, offset: int, size: int) -> Placement:
        key = (offset, size)
        p = self._blocks.get(key)
        if p is None:
            g = self.topology.gpus_per_node
            p = self._blocks[key] = tuple(divmod(i, g) for i in range(offset, offset + size))
        return p

    def _aligned_offset(self, p: Placement) -> int | None:
        """Start index if ``p`` is an aligned buddy block, else None."""
        g = self.topology.gpus_per_node
        ids = sorted(node * g + gpu for node, gpu in p)
        size = len(ids)
        if not ids or not is_power_of_two(size) or ids[0] % size:
            return None
        if ids[-1] - ids[0] != size - 1 or len(set(ids)) != size or ids[-1] >= self.total:
            return None
        return ids[0]

    def place(
        self, allocation: Mapping[str, int], current: Mapping[str, Placement]
    ) -> PlacementPlan:
        sizes = {j: int(n) for j, n in allocation.items() if n > 0}
        for j, n in sizes.items():
            if n & (n - 1):
                raise PlacementError(f"job {j}: {n} GPUs is not a power of two")
        if sum(sizes.values()) > self.total:
            raise PlacementError(f"{sum(sizes.values())} GPUs requested, {self.total} exist")
        last = self._last
        todo: list[tuple[int, str]] = []
        prev: dict[str, Placement] | None = None
        if last is not None and self._continues(last, current):
            # ``current`` is (a subset of) our previous answer: start from its grid, changed
            # in place (it is ours alone; forgotten until this answer is made, so a failure
            # half-way makes the next call start afresh), and free only the jobs that left
            # or changed size
            self._last = None
            prev, grid, offsets = last
            freed: list[str] = []
            for j, off in list(offsets.items()):
                n = len(prev[j])
                if sizes.get(j) != n or j not in current:
                    grid.set(off, n, None)
                    del offsets[j]
                    freed.append(j)
            todo = [(-n, j) for j, n in sizes.items() if j not in offsets]
        else:
            owner: list[str | None] = [None] * self.total
            offsets = {}
            for j, n in sizes.items():
                cur = current.get(j)
                keep = self._offset_of(cur) if cur and len(cur) == n else None
                if keep is not None and owner[keep : keep + n].count(None) == n:
                    owner[keep : keep + n] = [j] * n
                    offsets[j] = keep
                else:
                    todo.append((-n, j))
            grid = _Grid(owner)
        heapq.heapify(todo)  # largest first, then by id
        moved: set[str] = set()  # jobs evicted from the place they kept so far
        placed: list[str] = []
        while todo:
            neg, j = heapq.heappop(todo)
            n = -neg
            found = grid.best_fit(n)
            off = self._evict(grid, n, sizes, offsets, moved, todo) if found is None else found
            grid.set(off, n, j)
            offsets[j] = off
            placed.append(j)
        if prev is None:
            placements = {j: self._placement(offsets[j], n) for j, n in sizes.items()}
            rescaled = {j for j, p in current.items() if len(p) != sizes.get(j, 0)}
        else:
            # a job neither freed nor evicted keeps its block: the same placement object
            # (``_placement`` caches them); a job of ``current`` (every one is in ``prev``)
            # was freed where its size changed; every job not in ``prev`` was placed
            got = dict(zip(sizes, map(prev.get, sizes), strict=True))
            for j in placed:
                got[j] = self._placement(offsets[j], sizes[j])
            placements = cast("dict[str, Placement]", got)
            rescaled = {j for j in freed if j in current}
        rescaled.update(sizes.keys() - current.keys())
        migrated = {
            j for j in placed if j not in rescaled and set(current.get(j, ())) != set(placements[j])
        }
        charged = {j: self.overhead for j in rescaled | migrated if j in sizes}
        self._last = (dict(placements), grid, offsets)
        return PlacementPlan(
            placements, frozenset(rescaled), frozenset(migrated), charged, bool(moved)
        )

    @staticmethod
    def _continues(last: _State, current: Mapping[str, Placement]) -> bool:
        prev = last[0]
        if len(current) > len(prev):
            return False
        return all(map(operator.is_, map(prev.get, current), current.values()))

    def _offset_of(self, p: Placement) -> int | None:
        """Offset of a placement this placer produced (cached), else checked from scratch."""
        if len(p) and self._blocks.get((self._gid(p[0]), len(p))) == p:
            return self._gid(p[0])
        return self._aligned_offset(p)

    def _gid(self, ng: tuple[int, int]) -> int:
        return ng[0] * self.topology.gpus_per_node + ng[1]

    def _evict(
        self,
        grid: _Grid,
        n: int,
        sizes: Mapping[str, int],
        offsets: dict[str, int],
        moved: set[str],
        todo: list[tuple[int, str]],
    ) -> int:
        """Free the aligned n-block that is cheapest to evacuate; its jobs go back to
        ``todo``. Cost: jobs that would otherwise stay, then GPUs they hold."""
        owner = grid.owner
        best: tuple[int, int, int] | None = None
        for off in range(0, (self.total // n) * n, n):
            first = owner[off]
            if first is not None and sizes[first] >= n:
                continue  # inside a job at least as big: not movable for this one
            holders = {x for x in owner[off : off + n] if x is not None}
            stay = [x for x in holders if x not in moved]
            cost = (len(stay), sum(sizes[x] for x in stay), off)
            if best is None or cost < best:
                best = cost
        if best is None:  # cannot happen while sum(sizes) <= total
            raise PlacementError(f"no block of {n} GPUs can be freed")
        off = best[2]
        for x in {x for x in owner[off : off + n] if x is not None}:
            grid.set(offsets.pop(x), sizes[x], None)
            moved.add(x)
            heapq.heappush(todo, (-sizes[x], x))
        return off
