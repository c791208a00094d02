"""The GPUs' links -> the order buddy blocks follow (ElasticFlow, ASPLOS'23, section 4.3).

Pure, no I/O: the links come from NVML or a declared inventory (flowcon/engine/gpus.py).

``gpu_order`` turns one node's link matrix into an order of its GPU indices in which every
aligned power-of-two run of consecutive entries is as close as the links allow: the two GPUs
of each aligned pair share NVLink (or a PCIe switch) where some pairing does, each aligned
quad is the tightest pair of pairs, and so on. It is built bottom-up by matching: the
clusters of one size are paired greedily, cheapest pair first, the cost of a pair of
clusters being the farthest link between them (then the sum of all links between them);
a node whose GPU count is not a power of two keeps its unpaired cluster of each size as a
block of its own (6 GPUs: a quad and a pair). Where all links are alike the order is the
identity.

``Layout`` lays the nodes' blocks end to end, largest first, so each block starts at a
multiple of its size: a buddy block of 2^k slots is then inside one node's block when some
block is that big, or made of whole blocks of one size (equal nodes); an aligned run that
would mix blocks of different sizes is ``invalid`` and never handed out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

# link levels, closer first (the values of flowcon.engine.gpus.Link)
SAME, NVLINK, PCIE_SWITCH, HOST_BRIDGE, NUMA_NODE, SYSTEM = 0, 1, 2, 3, 4, 5

Links = Mapping[tuple[int, int], int]  # (a, b) with a < b -> link level (lower is closer)


def gpu_order(count: int, links: Links, default: int = SYSTEM) -> tuple[int, ...]:
    """GPU indices ``0 .. count-1`` in the order buddy blocks follow (see the module doc).

    ``links`` maps ``(a, b)`` (either order) to a link level; pairs it lacks are
    ``default`` apart. Blocks come largest first: ``count = 6`` gives a quad, then a pair.
    """
    if count < 0:
        raise ValueError(f"GPU count must be >= 0, got {count}")

    def dist(a: int, b: int) -> int:
        if a == b:
            return SAME
        return int(links.get((a, b) if a < b else (b, a), default))

    clusters: list[tuple[int, ...]] = [(i,) for i in range(count)]
    leftovers: list[tuple[int, ...]] = []  # unpaired clusters, smallest first
    while clusters:
        if len(clusters) == 1:
            leftovers.append(clusters[0])
            break
        costs: list[tuple[int, int, int, int]] = []
        for i, a in enumerate(clusters):
            for j in range(i + 1, len(clusters)):
                ds = [dist(x, y) for x in a for y in clusters[j]]
                costs.append((max(ds), sum(ds), i, j))
        costs.sort()
        used: set[int] = set()
        merged: list[tuple[int, ...]] = []
        want = len(clusters) // 2
        for _, _, i, j in costs:
            if i in used or j in used:
                continue
            used.update((i, j))
            merged.append(clusters[i] + clusters[j])
            if len(merged) == want:
                break
        leftovers.extend(c for k, c in enumerate(clusters) if k not in used)
        clusters = sorted(merged, key=min)
    out: list[int] = []
    for block in reversed(leftovers):
        out.extend(block)
    return tuple(out)


def blocks_of(order: Sequence[int]) -> list[tuple[int, ...]]:
    """``order`` cut into its power-of-two blocks, largest first (6 -> 4 + 2)."""
    out: list[tuple[int, ...]] = []
    n, lo = len(order), 0
    bit = 1 << max(0, n.bit_length() - 1)
    while bit:
        if n & bit:
            out.append(tuple(order[lo : lo + bit]))
            lo += bit
        bit >>= 1
    return out


@dataclass(frozen=True)
class Layout:
    """Buddy slots over the cluster: slot ``s`` is GPU ``slots[s]`` = (node index, GPU index).

    ``invalid[size]``: the aligned blocks of ``size`` slots (block ``b`` = slots
    ``[b*size, (b+1)*size)``) that mix node blocks of different sizes; ``spanning[size]``:
    the others made of several nodes' blocks (equal ones). ``uniform``: nodes
    of one power-of-two size, GPUs in index order (slot = node * size + gpu), as
    ``Topology`` describes them.
    """

    slots: tuple[tuple[int, int], ...]
    invalid: Mapping[int, frozenset[int]] = field(default_factory=dict)
    uniform: int = 0  # GPUs per node when uniform, else 0
    # spanning[size]: the valid aligned blocks of ``size`` made of several nodes' blocks
    spanning: Mapping[int, frozenset[int]] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return len(self.slots)

    @classmethod
    def of_nodes(cls, orders: Sequence[Sequence[int]]) -> Layout:
        """The layout of nodes whose GPUs come in ``orders[i]`` (``gpu_order``'s) order."""
        chunks: list[tuple[int, int, tuple[int, ...]]] = []  # (-size, node, gpus)
        for node, order in enumerate(orders):
            if len(set(order)) != len(order):
                raise ValueError(f"node {node}: a GPU index appears twice in {list(order)}")
            chunks.extend((-len(b), node, b) for b in blocks_of(order))
        chunks.sort(key=lambda c: (c[0], c[1]))
        slots: list[tuple[int, int]] = []
        size_at: list[int] = []  # the size of the block each slot is in
        for neg, node, gpus in chunks:
            slots.extend((node, g) for g in gpus)
            size_at.extend([-neg] * len(gpus))
        total = len(slots)
        invalid: dict[int, frozenset[int]] = {}
        spanning: dict[int, frozenset[int]] = {}
        s = 2
        while s <= total:
            several = [b for b in range(total // s) if size_at[b * s] < s]
            bad = frozenset(b for b in several if size_at[b * s] != size_at[b * s + s - 1])
            if bad:
                invalid[s] = bad
            if len(several) > len(bad):
                spanning[s] = frozenset(several) - bad
            s *= 2
        sizes = {len(o) for o in orders}
        uniform = 0
        if len(sizes) == 1:
            g = sizes.pop()
            if g and g & (g - 1) == 0 and all(tuple(o) == tuple(range(g)) for o in orders):
                uniform = g
        return cls(tuple(slots), invalid, uniform, spanning)

    @classmethod
    def uniform_nodes(cls, nodes: int, gpus_per_node: int) -> Layout:
        return cls.of_nodes([range(gpus_per_node)] * nodes)

    def describe_blocks(self) -> str:
        """Each node's GPUs in slot order, for messages: ``0: 0,4,1,5; 1: 0,1``."""
        per: dict[int, list[int]] = {}
        for node, gpu in self.slots:
            per.setdefault(node, []).append(gpu)
        return "; ".join(f"{n}: {','.join(map(str, v))}" for n, v in sorted(per.items()))
