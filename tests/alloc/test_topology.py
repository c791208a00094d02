"""The GPUs' links -> the order buddy blocks follow, and the layout of mixed nodes."""

from __future__ import annotations

import itertools

from flowcon.alloc.topology import (
    HOST_BRIDGE,
    NUMA_NODE,
    NVLINK,
    PCIE_SWITCH,
    SYSTEM,
    Layout,
    blocks_of,
    gpu_order,
)


def _groups(*groups: tuple[int, ...], level: int = NVLINK) -> dict[tuple[int, int], int]:
    return {(a, b): level for g in groups for a, b in itertools.combinations(sorted(g), 2)}


def _pairs(order: tuple[int, ...]) -> list[set[int]]:
    return [set(order[i : i + 2]) for i in range(0, len(order), 2)]


def test_no_links_keep_the_index_order() -> None:
    for n in range(0, 17):
        assert gpu_order(n, {}) == tuple(range(n))
    assert gpu_order(8, _groups(tuple(range(8)))) == tuple(range(8))  # NVSwitch: all alike


def test_nvlink_pairs_are_aligned_pairs() -> None:
    # pairs 0-4, 1-5, 2-6, 3-7 over NVLink, the rest PCIe/SYS
    order = gpu_order(8, _groups((0, 4), (1, 5), (2, 6), (3, 7)))
    assert _pairs(order) == [{0, 4}, {1, 5}, {2, 6}, {3, 7}]


def test_nvlink_quads_are_aligned_quads() -> None:
    order = gpu_order(8, _groups((0, 2, 4, 6), (1, 3, 5, 7)))
    assert {frozenset(order[:4]), frozenset(order[4:])} == {
        frozenset({0, 2, 4, 6}),
        frozenset({1, 3, 5, 7}),
    }


def test_dgx1_hybrid_cube_mesh() -> None:
    """DGX-1: two fully NVLinked quads (0-3, 4-7) joined by one link per GPU."""
    links = _groups((0, 1, 2, 3), (4, 5, 6, 7))
    links.update({(0, 4): NVLINK, (1, 5): NVLINK, (2, 6): NVLINK, (3, 7): NVLINK})
    order = gpu_order(8, links, default=SYSTEM)
    for i in range(0, 8, 2):
        a, b = sorted(order[i : i + 2])
        assert links.get((a, b)) == NVLINK
    assert {frozenset(order[:4]), frozenset(order[4:])} == {
        frozenset(range(4)),
        frozenset(range(4, 8)),
    }


def _pcie_two_sockets(switches: list[tuple[int, int]]) -> dict[tuple[int, int], int]:
    """Four PCIe switches of two GPUs, the first two under socket 0, the others socket 1."""
    links: dict[tuple[int, int], int] = {}
    for a, b in itertools.combinations(range(8), 2):
        sa = next(k for k, s in enumerate(switches) if a in s)
        sb = next(k for k, s in enumerate(switches) if b in s)
        if sa == sb:
            links[(a, b)] = PCIE_SWITCH
        elif sa // 2 == sb // 2:
            links[(a, b)] = NUMA_NODE
        else:
            links[(a, b)] = SYSTEM
    return links


def test_pcie_only_node_groups_by_switch_then_socket() -> None:
    order = gpu_order(8, _pcie_two_sockets([(0, 4), (1, 5), (2, 6), (3, 7)]))
    assert _pairs(order) == [{0, 4}, {1, 5}, {2, 6}, {3, 7}]
    assert set(order[:4]) == {0, 1, 4, 5}  # socket 0's two switches


def test_host_bridge_beats_sys() -> None:
    links = {(0, 3): HOST_BRIDGE, (1, 2): HOST_BRIDGE}
    assert _pairs(gpu_order(4, links)) == [{0, 3}, {1, 2}]


def test_odd_counts_split_into_power_of_two_blocks() -> None:
    order = gpu_order(6, _groups((0, 5), (1, 4), (2, 3)))
    assert sorted(order) == list(range(6))
    assert [len(b) for b in blocks_of(order)] == [4, 2]
    assert all(len(p) == 2 for p in _pairs(order))
    assert [len(b) for b in blocks_of(tuple(range(7)))] == [4, 2, 1]
    assert blocks_of(()) == []


def test_uniform_layout_is_node_major() -> None:
    lay = Layout.uniform_nodes(3, 8)
    assert lay.uniform == 8
    assert lay.slots == tuple((n, g) for n in range(3) for g in range(8))
    assert not lay.invalid


def test_mixed_layout_largest_first_and_invalid_blocks() -> None:
    # node 0: 4 GPUs, node 1: 8, node 2: 2, node 3: 2
    lay = Layout.of_nodes([range(4), range(8), range(2), range(2)])
    assert lay.uniform == 0
    assert lay.slots[:8] == tuple((1, g) for g in range(8))
    assert lay.slots[8:12] == tuple((0, g) for g in range(4))
    assert lay.slots[12:] == ((2, 0), (2, 1), (3, 0), (3, 1))
    # [8, 16) mixes the 4-GPU node with the two 2-GPU ones; [12, 16) is two equal nodes
    assert lay.invalid[8] == frozenset({1})
    assert 3 not in lay.invalid.get(4, frozenset())
    assert lay.invalid[16] == frozenset({0})
    assert lay.spanning[4] == frozenset({3})  # the two 2-GPU nodes
    assert 2 not in lay.spanning
