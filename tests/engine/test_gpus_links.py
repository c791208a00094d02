"""Declared links (``links`` matrix, ``pcie`` and ``nvlink`` groups) and the placer's layout
built from an inventory: nodes of different sizes, GPUs in link order."""

from __future__ import annotations

import pytest

from flowcon.alloc.placement import BuddyPlacer
from flowcon.allocator.target import build_placer
from flowcon.engine.gpus import Inventory, Link, declared_nodes, discover, layout_of, link_word

# nvidia-smi topo -m of a node with NVLink pairs 0-2 and 1-3, PCIe switches {0,1} {2,3}
MATRIX = [
    ["X", "PIX", "NV4", "SYS"],
    ["PIX", "X", "SYS", "NV4"],
    ["NV4", "SYS", "X", "PIX"],
    ["SYS", "NV4", "PIX", "X"],
]


def _inventory(*nodes: dict[str, object]) -> Inventory:
    return Inventory(tuple(declared_nodes({"nodes": list(nodes)})), "declared")


def test_links_matrix_is_read_as_nvidia_smi_prints_it() -> None:
    (node,) = declared_nodes({"nodes": [{"name": "a", "gpus": 4, "links": MATRIX}]})
    assert node.link(0, 2) == Link.NVLINK
    assert node.link(0, 1) == Link.PCIE_SWITCH
    assert node.link(3, 0) == Link.SYSTEM
    assert node.nvlink_groups() == [[0, 2], [1, 3]]


def test_link_words() -> None:
    assert link_word("NV12") == link_word("nv1") == Link.NVLINK
    assert link_word("PXB") == Link.PCIE_SWITCH
    assert link_word("PHB") == Link.HOST_BRIDGE
    assert link_word("NODE") == Link.NUMA_NODE
    assert link_word("SYS") == Link.SYSTEM
    assert link_word("X") == Link.SAME
    assert link_word("bogus") is None
    assert link_word(3) is None


def test_groups_refine_the_matrix() -> None:
    (node,) = declared_nodes(
        {"nodes": [{"name": "a", "gpus": 4, "pcie": [[0, 1], [2, 3]], "nvlink": [[1, 2]]}]}
    )
    assert node.link(0, 1) == Link.PCIE_SWITCH
    assert node.link(1, 2) == Link.NVLINK  # NVLink wins over the PCIe level
    assert node.link(0, 3) == Link.SYSTEM


@pytest.mark.parametrize(
    ("node", "match"),
    [
        ({"links": [["X", "SYS"]]}, "2 x 2 matrix"),
        ({"links": [["X", "PIX"], ["SYS", "X"]]}, "not symmetric"),
        ({"links": [["X", "FOO"], ["FOO", "X"]]}, r"links\[0\]\[1\] is 'FOO'"),
        ({"links": [["PIX", "PIX"], ["PIX", "X"]]}, "diagonal"),
        ({"pcie": [[0, 2]]}, "pcie groups must list GPU indices below 2"),
        ({"pcie": "0,1"}, "pcie must be a list"),
    ],
)
def test_bad_links_name_the_field(node: dict[str, object], match: str) -> None:
    with pytest.raises(ValueError, match=match):
        declared_nodes({"nodes": [{"name": "a", "gpus": 2, **node}]})


def test_layout_follows_the_links() -> None:
    inv = _inventory({"name": "a", "gpus": 4, "links": MATRIX})
    lay = layout_of(inv)
    assert [set(lay.slots[i : i + 2]) for i in (0, 2)] == [{(0, 0), (0, 2)}, {(0, 1), (0, 3)}]
    placer = build_placer(inv)
    assert placer is not None
    plan = placer.place({"x": 2, "y": 2}, {})
    for p in plan.placements.values():
        a, b = sorted(g for _, g in p)
        assert inv.nodes[0].link(a, b) == Link.NVLINK


def test_pcie_only_node_two_switches_two_sockets() -> None:
    # switches {0,2} and {1,3} under socket 0 / socket 1: pairs follow the switches
    inv = _inventory({"name": "a", "gpus": 4, "pcie": [[0, 2], [1, 3]]})
    plan = BuddyPlacer(layout_of(inv)).place({"x": 2, "y": 1, "z": 1}, {})
    assert {g for _, g in plan.placements["x"]} in ({0, 2}, {1, 3})


def test_mixed_inventory_gets_a_placer() -> None:
    inv = _inventory(
        {"name": "n4", "gpus": 4},
        {"name": "empty", "gpus": 0},
        {"name": "n8", "gpus": 8, "nvlink": [list(range(8))]},
        {"name": "n2", "gpus": 2},
    )
    placer = build_placer(inv)
    assert placer is not None
    assert placer.total == 14
    plan = placer.place({"a": 8, "b": 4, "c": 2}, {})
    names = [n.name for n in inv.gpu_nodes()]
    assert {names[n] for n, _ in plan.placements["a"]} == {"n8"}
    assert {names[n] for n, _ in plan.placements["b"]} == {"n4"}
    assert {names[n] for n, _ in plan.placements["c"]} == {"n2"}


def test_homogeneous_inventory_places_as_before() -> None:
    inv = _inventory({"name": "a", "gpus": 4, "nvlink": [[0, 1], [2, 3]]}, {"name": "b", "gpus": 4})
    placer = build_placer(inv)
    assert placer is not None
    assert placer.layout.uniform == 4
    assert placer.topology is not None
    assert (placer.topology.nodes, placer.topology.gpus_per_node) == (2, 4)
    assert build_placer(_inventory({"name": "a", "gpus": 0})) is None


def test_nvml_links_order_the_local_node() -> None:
    """NVML's NVLinks (here 0-2 and 1-3, PCIe between the others) set the local node's
    order: the placer's pairs are the NVLink pairs."""
    from test_gpus import FakeNvml

    class Crossed(FakeNvml):
        def __init__(self) -> None:
            super().__init__()
            self.peers = {0: 2, 2: 0, 1: 3, 3: 1}

        def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
            return 10  # one PCIe switch for all

    inv = discover({}, nvml=Crossed(), hostname="local")
    assert inv.source == "nvml"
    plan = BuddyPlacer(layout_of(inv)).place({"x": 2, "y": 2}, {})
    assert sorted(sorted(g for _, g in p) for p in plan.placements.values()) == [[0, 2], [1, 3]]
