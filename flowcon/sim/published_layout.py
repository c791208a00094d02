"""Where the published ElasticFlow simulator (pkusys/ElasticFlow, its ``elastic`` placement
scheme) lays out the jobs of one scheduling event on the GPUs, and which GPU ranks it
records for each: the key of its trainer cache (``--world published``, see
``flowcon/sim/world.py``). Re-implemented from a reading of its code. The ElasticFlow paper
(ASPLOS'23) keeps CUDA contexts and NCCL process groups alive to make rescaling cheap
(section 5), says its simulator charges an overhead to each job on each scheduling event
(section 6.1) and measures those overheads (section 6.6); the cheaper charge for GPUs used
before, and how that simulator decides it, are only in its code.

What the published simulator does at every event, as modelled here:

- Every running job is released first, so the layout starts from an empty cluster (all
  nodes free, in id order).
- Jobs are placed in its runnable order sorted by GPU count, largest first: all jobs of a
  node or more, then the smaller sizes class by class (4, 2, then 1 on 8-GPU nodes).
- A *node set* is one or more nodes opened for a job (as many as it needs, the lowest free
  ids). It sits in the list of the largest size class that divides its free GPUs (the
  list of the job's own size when it is full). A job of ``n`` GPUs tries, in turn: the
  first set of class ``n``; the first set of each larger class (largest first); a new set.
  A set that does not take the job goes to the back of its list; after a placement the
  lists touched are sorted by used GPUs (stably).
- Its scheduling log then walks the nodes in id order: a free node skips its GPUs; a set
  of a node or more gives its job the ranks from its first node on; a smaller set gives
  its jobs consecutive ranks in the order they joined it. The contiguous ranks a job gets
  (first rank, count) are its key in the cache.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

# The size classes of the published simulator's node-set lists (its ``node_g``), in the
# order its log searches them.
CLASSES = (1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 72, 88, 128, 256)

RankKey = tuple[int, int]  # (first GPU rank, GPUs)


@dataclass
class _NodeSet:
    nodes: list[int]
    capacity: int
    used: int = 0
    jobs: list[tuple[str, int]] = field(default_factory=list)


class ElasticLayout:
    """The published ``elastic`` placement on an empty cluster of ``num_nodes`` nodes of
    ``gpus_per_node`` GPUs (see module)."""

    def __init__(self, num_nodes: int, gpus_per_node: int) -> None:
        self.gpus_per_node = gpus_per_node
        self.free_nodes = list(range(num_nodes))
        self.lists: dict[int, list[_NodeSet]] = {c: [] for c in CLASSES}

    def _class_of(self, free: int) -> int:
        """The largest class that divides ``free`` (> 0) GPUs."""
        return next(c for c in reversed(CLASSES) if c <= free and free % c == 0)

    def _sort(self, *classes: int) -> None:
        for c in classes:
            self.lists[c].sort(key=lambda s: s.used)

    def _join(self, s: _NodeSet, job: str, n: int) -> None:
        """``job`` joins set ``s``; the set moves to the class of its free GPUs (the
        job's own class ``n`` when full)."""
        s.used += n
        s.jobs.append((job, n))
        free = len(s.nodes) * self.gpus_per_node - s.used
        c = self._class_of(free) if free > 0 else n
        self.lists[c].append(s)
        self._sort(n, c)

    def place(self, job: str, n: int) -> bool:
        """Place ``job`` on ``n`` GPUs; False: no room the published way, or no class of
        ``n`` GPUs (the published simulator would stop)."""
        if n not in self.lists:
            return False
        own = self.lists[n]
        if own:
            s = own.pop(0)
            if s.used + n <= s.capacity:
                self._join(s, job, n)
                return True
            own.append(s)
        for c in reversed(CLASSES):  # fill in sets of larger classes, largest first
            if c <= n:
                break
            other = self.lists[c]
            if not other:
                continue
            s = other.pop(0)
            if s.used + n <= s.capacity:
                self._join(s, job, n)
                return True
            other.append(s)
        need = -(-n // self.gpus_per_node)
        if need > len(self.free_nodes):
            return False
        nodes, self.free_nodes = self.free_nodes[:need], self.free_nodes[need:]
        self._join(_NodeSet(nodes, need * self.gpus_per_node), job, n)
        return True

    def ranks(self) -> dict[str, RankKey]:
        """Each placed job's (first rank, GPUs) as the published log records them."""
        g = self.gpus_per_node
        where: dict[int, tuple[int, _NodeSet]] = {}
        for c in CLASSES:  # the log takes the first class whose list holds the node
            for s in self.lists[c]:
                for node in s.nodes:
                    where.setdefault(node, (c, s))
        out: dict[str, RankKey] = {}
        for node in sorted(where):
            c, s = where[node]
            pos = node * g
            if c >= g:
                job, n = s.jobs[0]
                out.setdefault(job, (pos, n))
                continue
            for job, n in s.jobs:
                out[job] = (pos, n)
                pos += n
        return out


def published_rank_keys(
    jobs: Sequence[tuple[str, int]], num_nodes: int, gpus_per_node: int
) -> dict[str, RankKey | None]:
    """The rank key of each ``(job, GPUs)`` when the published simulator lays out one
    event's allocation, ``jobs`` in its runnable order. Jobs of a node or more are placed
    first (largest first), then each smaller class, largest first; ties keep the given
    order. None: a job it could not place (published: an assertion; never seen)."""
    ordered = sorted((j for j in jobs if j[1] > 0), key=lambda j: -j[1])
    keys = _layout(tuple(n for _, n in ordered), num_nodes, gpus_per_node)
    return dict(zip((job for job, _ in ordered), keys, strict=True))


@lru_cache(maxsize=4096)
def _layout(
    sizes: tuple[int, ...], num_nodes: int, gpus_per_node: int
) -> tuple[RankKey | None, ...]:
    """Rank keys for jobs of ``sizes`` (descending), in that order: the layout depends on
    the sizes alone (consecutive events often repeat them)."""
    layout = ElasticLayout(num_nodes, gpus_per_node)
    placed = [layout.place(str(i), n) for i, n in enumerate(sizes)]
    keys = layout.ranks()
    return tuple(keys[str(i)] if ok else None for i, ok in enumerate(placed))
