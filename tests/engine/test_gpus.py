"""GPU inventory: NVML absent (this machine) falls back to the declared inventory with one
warning; NVML present is exercised with a mock pynvml."""

from __future__ import annotations

import logging
from types import SimpleNamespace
from typing import Any

import pytest

from flowcon.engine import gpus
from flowcon.engine.gpus import Link, declared_nodes, discover

DECLARED = {
    "declared": {
        "nodes": [
            {"name": "node1", "gpus": 4, "nvlink": [[0, 1], [2, 3]]},
            {"name": "node2", "gpus": 4},
        ]
    }
}


@pytest.fixture(autouse=True)
def _fresh_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gpus, "_warned", False)


def test_real_nvml_absent_here_uses_declared_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="flowcon.engine.gpus")
    inv = discover(DECLARED)  # the real pynvml: no driver on this machine
    if inv.source.startswith("nvml"):
        pytest.skip("this machine has NVML GPUs")
    assert inv.source == "declared"
    assert inv.total_gpus == 8
    assert not inv.real
    assert inv.node("node1").uuids([0, 3]) == ["FAKE-node1-0", "FAKE-node1-3"]
    assert inv.tree() == {"node1": [[0, 1], [2, 3]], "node2": [[0], [1], [2], [3]]}
    assert inv.node("node1").link(0, 1) == Link.NVLINK
    assert inv.node("node1").link(1, 2) == Link.SYSTEM
    discover(DECLARED)
    msgs = [r.getMessage() for r in caplog.records]
    assert len(msgs) == 1
    assert "NVML unavailable" in msgs[0]
    assert "declared" in msgs[0]
    topo = inv.to_topology()
    assert (topo.nodes, topo.gpus_per_node) == (2, 4)


def test_nothing_declared_and_bad_declared_never_crash(caplog: pytest.LogCaptureFixture) -> None:
    class NoNvml:
        def nvmlInit(self) -> None:
            raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    inv = discover({}, nvml=NoNvml())
    assert inv.source == "none"
    assert inv.total_gpus == 0
    inv = discover({"declared": {"nodes": [{"name": "a", "gpus": "four"}]}}, nvml=NoNvml())
    assert inv.total_gpus == 0
    assert any("gpus.declared.nodes[0].gpus" in r.getMessage() for r in caplog.records)
    with pytest.raises(ValueError, match="nvlink"):
        declared_nodes({"nodes": [{"name": "a", "gpus": 2, "nvlink": [[0, 5]]}]})
    with pytest.raises(ValueError, match="repeated"):
        declared_nodes({"nodes": [{"name": "a", "gpus": 1}, {"name": "a", "gpus": 1}]})
    with pytest.raises(ValueError, match="different GPU counts"):
        discover(
            {"declared": {"nodes": [{"name": "a", "gpus": 1}, {"name": "b", "gpus": 2}]}},
            nvml=NoNvml(),
        ).to_topology()


class FakeNvml:
    """4 GPUs: 0-1 and 2-3 joined by NVLink; 0/1 vs 2/3 across sockets."""

    NVML_NVLINK_MAX_LINKS = 4
    NVML_FEATURE_ENABLED = 1

    def __init__(self) -> None:
        self.shutdown = False
        self.peers = {0: 1, 1: 0, 2: 3, 3: 2}

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shutdown = True

    def nvmlDeviceGetCount(self) -> int:
        return 4

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetUUID(self, h: int) -> bytes:
        return f"GPU-uuid-{h}".encode()  # older bindings return bytes

    def nvmlDeviceGetName(self, h: int) -> str:
        return "NVIDIA A100"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> Any:
        return SimpleNamespace(total=40 << 30)

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=f"00000000:0{h}:00.0")

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return 10 if a // 2 == b // 2 else 50

    def nvmlDeviceGetNvLinkState(self, h: int, link: int) -> int:
        if link >= 2:
            raise RuntimeError("NVML_ERROR_INVALID_ARGUMENT")
        return 1 if link == 0 else 0

    def nvmlDeviceGetNvLinkRemotePciInfo(self, h: int, link: int) -> Any:
        return SimpleNamespace(busId=f"0000:0{self.peers[h]}:00.0")  # short domain form


def test_nvml_present_reads_uuids_and_topology() -> None:
    nvml = FakeNvml()
    inv = discover(DECLARED, nvml=nvml, hostname="node1")
    assert inv.source == "nvml+declared"
    assert inv.real
    assert nvml.shutdown
    local = inv.node("node1")
    assert local.real
    assert [g.uuid for g in local.gpus] == [f"GPU-uuid-{i}" for i in range(4)]
    assert local.gpus[0].name == "NVIDIA A100"
    assert local.gpus[0].memory_bytes == 40 << 30
    assert local.link(0, 1) == Link.NVLINK
    assert local.link(2, 3) == Link.NVLINK
    assert local.link(1, 2) == Link.SYSTEM
    assert local.nvlink_groups() == [[0, 1], [2, 3]]
    assert not inv.node("node2").real  # the other node stays declared


def test_nvml_query_failure_degrades() -> None:
    class Broken(FakeNvml):
        def nvmlDeviceGetUUID(self, h: int) -> bytes:
            raise RuntimeError("GPU is lost")

    inv = discover(DECLARED, nvml=Broken(), hostname="node1")
    assert inv.source == "declared"
    assert not inv.real
