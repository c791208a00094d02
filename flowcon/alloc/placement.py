"""Topology-aware placement with buddy allocation (ElasticFlow section 4.3).

GPUs are numbered node-major (global index = node * gpus_per_node + gpu). A job of 2^k GPUs
gets an aligned block of 2^k consecutive indices: inside one node when 2^k <= GPUs per node,
whole neighbouring nodes otherwise, so its workers are as close as the topology allows.
Built from a ``flowcon.alloc.topology.Layout`` instead, the indices are the layout's slots:
nodes of different sizes (each cut into power-of-two blocks, laid out largest first) and
GPUs inside a node in link order (an aligned pair shares NVLink where a pairing does); a
block that would mix node blocks of different sizes is never handed out, so a job bigger
than every node spans nodes of one size or is refused (``PlacementError``); a block inside
one node is taken before one over several, and an enclosing block that can never be whole
(mixed or past the end) counts as full, so small jobs fill small nodes first.

``blocked`` GPUs (a drained node, a GPU a straggler left) are held by nobody: a job on one
is moved, and the placement fails when the other GPUs cannot hold the allocation.

Jobs whose size did not change stay where they are. The others are placed largest first;
among free aligned blocks, Best-Fit picks the one whose buddy (the enclosing block of twice
the size) has the fewest idle GPUs. Only when no aligned block is free although enough GPUs
are idle (fragmentation) are jobs moved, and only the ones in the way: the block chosen is
the one whose evacuation moves the fewest jobs that would otherwise stay (then the fewest
GPUs). Aligned power-of-two blocks nest, so such a block never cuts a bigger job, the
evicted jobs are all smaller and are placed again the same way; with power-of-two sizes this
always succeeds when the GPUs suffice (on equal nodes with no GPU blocked). Each rescaled
or migrated job is charged ``overhead`` seconds of lost progress.
"""

from __future__ import annotations

import heapq
import operator
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import cast

from flowcon.alloc.model import Topology, is_power_of_two
from flowcon.alloc.topology import Layout

Placement = tuple[tuple[int, int], ...]  # ((node_index, gpu_index), ...)

BLOCKED = "\x00blocked"  # owner of a blocked GPU in the grid (no job id is this)
_INVALID = -(1 << 40)  # added to an invalid block's idle count: never free, never a buddy


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

    def __init__(
        self,
        owner: list[str | None],
        invalid: Mapping[int, frozenset[int]] | None = None,
        spanning: Mapping[int, frozenset[int]] | None = None,
    ) -> None:
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
        # blocks that mix node blocks of different sizes (a ``Layout``'s): never found free
        # by ``best_fit``; as an enclosing block they count as full but for the candidate
        # itself (nothing can merge into them), and so does a block past the end of such a
        # layout, which is incomplete
        self.layout = invalid is not None
        self.spanning = spanning or {}  # blocks over several nodes: only when no other is free
        for s, bad in (invalid or {}).items():
            counts = self.idle[s]
            for b in bad:
                counts[b] += _INVALID

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
        across = self.spanning.get(n)
        if across:
            inside = [b for b in cands if b not in across]
            cands = inside or cands
        s = 2 * n
        while len(cands) > 1 and s in self.idle:
            parent = self.idle[s]
            shift = (s // n).bit_length() - 1
            if self.layout:  # an invalid or incomplete enclosing block: only ``b`` idle
                scores = [
                    max(parent[b >> shift], n) if (b >> shift) < len(parent) else n for b in cands
                ]
            else:  # an incomplete enclosing block: all idle
                scores = [parent[b >> shift] if (b >> shift) < len(parent) else s for b in cands]
            low = min(scores)
            cands = [b for b, sc in zip(cands, scores, strict=True) if sc == low]
            s *= 2
        return cands[0] * n


# (placements returned, the grid they leave, offset per job)
_State = tuple[dict[str, Placement], _Grid, dict[str, int]]


class BuddyPlacer:
    """Buddy placement over a ``Topology`` (equal power-of-two nodes, GPUs in index order)
    or a ``Layout`` (nodes of any sizes, GPUs in link order; ``flowcon.alloc.topology``)."""

    def __init__(self, topology: Topology | Layout, overhead: float = 0.0) -> None:
        if isinstance(topology, Layout):
            layout = topology
            g = layout.uniform
            self.topology: Topology | None = (
                Topology(layout.total // g, g) if g and layout.total else None
            )
        else:
            if not is_power_of_two(topology.gpus_per_node):
                raise PlacementError("buddy placement needs a power-of-two GPU count per node")
            self.topology = topology
            g = topology.gpus_per_node
            layout = Layout((), {}, g)  # slots are node * g + gpu: no table needed
        self.layout = layout
        self.overhead = float(overhead)
        self.total = self.topology.total_gpus if self.topology is not None else layout.total
        self._g = g  # GPUs per node where slot = node * g + gpu, else 0 (the layout's slots)
        self._slot: dict[tuple[int, int], int] = {ng: i for i, ng in enumerate(layout.slots)}
        # blocks mixing node sizes; None for the node-major order (no layout to consult)
        self._invalid: Mapping[int, frozenset[int]] | None = None if g else layout.invalid
        self._spanning: Mapping[int, frozenset[int]] = {} if g else layout.spanning
        self._largest = self._largest_block()
        self._blocks: dict[tuple[int, int], Placement] = {}  # (offset, size) -> placement
        self._last: _State | None = None  # our previous answer, its grid and offsets
        self._last_blocked: frozenset[int] = frozenset()  # the blocked slots it kept free

    def _largest_block(self) -> int:
        """The largest power of two that some complete, valid aligned block has."""
        best, s = 0, 1
        while s <= self.total:
            if len((self._invalid or {}).get(s, ())) < self.total // s:
                best = s
            s *= 2
        return best

    def _placement(self, offset: int, size: int) -> Placement:
        key = (offset, size)
        p = self._blocks.get(key)
        if p is None:
            g = self._g
            if g:
                p = tuple(divmod(i, g) for i in range(offset, offset + size))
            else:
                p = self.layout.slots[offset : offset + size]
            self._blocks[key] = p
        return p

    def _aligned_offset(self, p: Placement) -> int | None:
        """Start index if ``p`` is an aligned (valid) buddy block, else None."""
        g = self._g
        if g:
            ids = sorted(node * g + gpu for node, gpu in p)
        else:
            found = [self._slot.get((int(node), int(gpu))) for node, gpu in p]
            if None in found:
                return None
            ids = sorted(cast("list[int]", found))
        size = len(ids)
        if not ids or not is_power_of_two(size) or ids[0] % size:
            return None
        if ids[-1] - ids[0] != size - 1 or len(set(ids)) != size or ids[-1] >= self.total:
            return None
        if self._invalid and ids[0] // size in self._invalid.get(size, ()):
            return None
        return ids[0]

    def _blocked_slots(self, blocked: AbstractSet[tuple[int, int]]) -> frozenset[int]:
        """The slots of the blocked (node, gpu) pairs this cluster has."""
        g = self._g
        if g:
            nodes = self.total // g
            return frozenset(
                node * g + gpu for node, gpu in blocked if 0 <= node < nodes and 0 <= gpu < g
            )
        return frozenset(i for i in map(self._slot.get, blocked) if i is not None)

    def _admissible(
        self, sizes: Mapping[str, int], blocked: AbstractSet[tuple[int, int]]
    ) -> frozenset[int]:
        """The blocked slots, once ``sizes`` are known to be placeable at all."""
        for j, n in sizes.items():
            if n & (n - 1):
                raise PlacementError(f"job {j}: {n} GPUs is not a power of two")
            if n > self._largest:
                raise PlacementError(
                    f"job {j}: {n} GPUs fit in no node and no run of equal nodes"
                    f" (the largest block is {self._largest} GPUs)"
                )
        off_limits = self._blocked_slots(blocked) if blocked else frozenset()
        usable = self.total - len(off_limits)
        if sum(sizes.values()) > usable:
            detail = f" ({len(off_limits)} of {self.total} blocked)" if off_limits else ""
            raise PlacementError(f"{sum(sizes.values())} GPUs requested, {usable} usable{detail}")
        return off_limits

    def place(
        self,
        allocation: Mapping[str, int],
        current: Mapping[str, Placement],
        *,
        blocked: AbstractSet[tuple[int, int]] = frozenset(),
    ) -> PlacementPlan:
        """Place ``allocation`` (job -> power-of-two GPU count), starting from ``current``
        (job -> its GPUs now). ``blocked``: (node index, GPU index) pairs no job may use; a
        job on one is moved. Raises ``PlacementError`` when the GPUs cannot hold it."""
        sizes = {j: int(n) for j, n in allocation.items() if n > 0}
        off_limits = self._admissible(sizes, blocked)
        last = self._last
        todo: list[tuple[int, str]] = []
        prev: dict[str, Placement] | None = None
        if last is not None and off_limits == self._last_blocked and self._continues(last, current):
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
            for i in off_limits:
                owner[i] = BLOCKED
            offsets = {}
            for j, n in sizes.items():
                cur = current.get(j)
                keep = self._offset_of(cur) if cur and len(cur) == n else None
                if keep is not None and owner[keep : keep + n].count(None) == n:
                    owner[keep : keep + n] = [j] * n
                    offsets[j] = keep
                else:
                    todo.append((-n, j))
            grid = _Grid(owner, self._invalid, self._spanning)
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
        self._last_blocked = off_limits
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
        g = self._g
        return ng[0] * g + ng[1] if g else self._slot.get(ng, -1)

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
        best: tuple[int, int, int, int] | None = None
        bad = self._invalid.get(n, ()) if self._invalid else ()
        across = self._spanning.get(n, ()) if self._spanning else ()
        for off in range(0, (self.total // n) * n, n):
            first = owner[off]
            if first is not None and (first == BLOCKED or sizes[first] >= n):
                continue  # inside a job at least as big: not movable for this one
            if bad and off // n in bad:
                continue  # mixes node blocks of different sizes
            holders = {x for x in owner[off : off + n] if x is not None}
            if BLOCKED in holders:
                continue
            stay = [x for x in holders if x not in moved]
            apart = 1 if across and off // n in across else 0  # over several nodes: last
            cost = (len(stay), sum(sizes[x] for x in stay), apart, off)
            if best is None or cost < best:
                best = cost
        if best is None:  # only with blocked GPUs or nodes of different sizes
            raise PlacementError(
                f"no block of {n} GPUs can be freed: the unblocked GPUs cannot hold the"
                " allocation as whole buddy blocks"
            )
        off = best[3]
        for x in {x for x in owner[off : off + n] if x is not None}:
            grid.set(offsets.pop(x), sizes[x], None)
            moved.add(x)
            heapq.heappush(todo, (-sizes[x], x))
        return off
