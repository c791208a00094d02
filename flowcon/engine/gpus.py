"""GPU inventory per node: count, UUIDs and the interconnect that placement cares about.

ElasticFlow places a job's workers by topology (section 4.3): GPUs joined by NVLink beat
GPUs behind one PCIe switch, which beat GPUs across sockets, which beat GPUs on other
machines. NVML tells us this for the local machine. Where NVML is missing (no driver, a CPU
host, CI) we say so once and fall back to a declared inventory from config, so the allocator
and executor run unchanged on CPU-only machines with fake GPU ids ("FAKE-node1-0").

Config (the ``gpus`` section)::

    gpus:
      node_name: node1          # name of this machine's node when NVML is present
      declared:
        nodes:
          - {name: node1, gpus: 4, nvlink: [[0, 1], [2, 3]]}   # nvlink groups optional
          - name: node0                                        # a real GPU node: its
            gpus: 2                                            # GPUs' UUIDs (nvidia-smi -L)
            uuids: [GPU-3f1c..., GPU-9a2e...]
          - {name: node2, gpus: 4, pcie: [[0, 1], [2, 3]]}     # GPUs behind one PCIe switch
          - name: node3                                        # or the full matrix, as
            gpus: 4                                            # ``nvidia-smi topo -m``
            links:                                             # prints it
              - [X,   NV4, PIX, SYS]
              - [NV4, X,   SYS, PIX]
              - [PIX, SYS, X,   NV4]
              - [SYS, PIX, NV4, X]

A declared GPU without ``uuids`` gets the stable id ``FAKE-<node>-<index>``. Whatever the
source, the executor sets each job container's ``NVIDIA_VISIBLE_DEVICES`` to exactly its
GPUs' ids (flowcon/executor/visibility.py), so declare a real node's UUIDs: under the NVIDIA
runtime a fake id names no GPU and the container does not start (it never sees them all).
Pairs nothing names are ``SYS`` (across the CPU sockets). ``layout_of`` turns the inventory
into the buddy placer's ``Layout`` (flowcon/alloc/topology.py): nodes of any sizes, GPUs of
each node in link order.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from flowcon.alloc.topology import Layout, gpu_order
from flowcon.core.gpu_usage import GpuDevice, GpuProcess, GpuSample

log = logging.getLogger(__name__)


class Link(IntEnum):
    """How two GPUs talk, best first (lower is closer). Mirrors NVML's topology levels."""

    SAME = 0
    NVLINK = 1
    PCIE_SWITCH = 2  # NVML_TOPOLOGY_SINGLE / MULTIPLE
    HOST_BRIDGE = 3  # NVML_TOPOLOGY_HOSTBRIDGE
    NUMA_NODE = 4  # NVML_TOPOLOGY_NODE
    SYSTEM = 5  # NVML_TOPOLOGY_SYSTEM: across CPU sockets
    NETWORK = 6  # different machines


# NVML topology level -> Link (values from nvml.h)
_NVML_LEVEL = {
    0: Link.SAME,
    10: Link.PCIE_SWITCH,
    20: Link.PCIE_SWITCH,
    30: Link.HOST_BRIDGE,
    40: Link.NUMA_NODE,
    50: Link.SYSTEM,
}


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str = ""
    memory_bytes: int = 0


@dataclass(frozen=True)
class NodeInventory:
    name: str
    gpus: tuple[Gpu, ...]
    real: bool  # True only for GPUs NVML reported: device requests are made for these alone
    # (i, j) with i < j -> Link; pairs missing here are Link.SYSTEM (declared) or unknown.
    links: Mapping[tuple[int, int], Link] = field(default_factory=dict)

    @property
    def count(self) -> int:
        return len(self.gpus)

    def link(self, a: int, b: int) -> Link:
        if a == b:
            return Link.SAME
        return self.links.get((min(a, b), max(a, b)), Link.SYSTEM)

    def nvlink_groups(self) -> list[list[int]]:
        """GPU indices grouped into NVLink-connected components (singletons included)."""
        parent = {g.index: g.index for g in self.gpus}

        def find(x: int) -> int:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for (a, b), link in self.links.items():
            if link == Link.NVLINK and a in parent and b in parent:
                parent[find(a)] = find(b)
        groups: dict[int, list[int]] = {}
        for g in self.gpus:
            groups.setdefault(find(g.index), []).append(g.index)
        return sorted(groups.values())

    def uuids(self, indices: Sequence[int]) -> list[str]:
        by_index = {g.index: g.uuid for g in self.gpus}
        return [by_index[i] for i in indices]


@dataclass(frozen=True)
class Inventory:
    nodes: tuple[NodeInventory, ...]
    source: str  # "nvml", "declared", "nvml+declared" or "none"

    @property
    def total_gpus(self) -> int:
        return sum(n.count for n in self.nodes)

    @property
    def real(self) -> bool:
        return any(n.real for n in self.nodes)

    def node(self, name: str) -> NodeInventory:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(f"no node {name!r} in the GPU inventory")

    def tree(self) -> dict[str, list[list[int]]]:
        """Placement tree: node -> NVLink groups of GPU indices (machine > group > GPU)."""
        return {n.name: n.nvlink_groups() for n in self.nodes}

    def gpu_nodes(self) -> list[NodeInventory]:
        """Nodes with at least one GPU, in inventory order (index i = the core's node i)."""
        return [n for n in self.nodes if n.count > 0]

    def to_topology(self) -> Any:
        """The allocator core's ``Topology``: one switch of equal nodes (node i = gpu_nodes()[i]).

        The core models homogeneous nodes; a mixed inventory is rejected rather than guessed.
        """
        from flowcon.alloc import model

        nodes = self.gpu_nodes()
        if not nodes:
            raise ValueError("the GPU inventory is empty")
        counts = {n.count for n in nodes}
        if len(counts) != 1:
            detail = ", ".join(f"{n.name}={n.count}" for n in nodes)
            raise ValueError(f"nodes have different GPU counts ({detail}); the core needs equal")
        return model.Topology(nodes_per_switch=len(nodes), gpus_per_node=counts.pop())


def layout_of(inventory: Any) -> Layout:
    """The buddy placer's ``flowcon.alloc.topology.Layout`` of ``inventory``: its nodes with
    GPUs (node i = gpu_nodes()[i]), each node's GPUs in the order its links give
    (``gpu_order``). Nodes without link information (``links``) count as all ``SYS``."""
    orders: list[tuple[int, ...]] = []
    for node in inventory.nodes:
        if node.count <= 0:
            continue
        links = getattr(node, "links", None) or {}
        levels = {(min(a, b), max(a, b)): int(v) for (a, b), v in links.items()}
        orders.append(gpu_order(node.count, levels, default=int(Link.SYSTEM)))
    return Layout.of_nodes(orders)


# ---------------------------------------------------------------- discovery

_warned = False


def discover(
    config: Mapping[str, Any] | None = None, nvml: Any | None = None, hostname: str | None = None
) -> Inventory:
    """Local GPUs from NVML plus declared nodes; never raises, degrades with one warning.

    ``nvml`` is the pynvml module (injected by tests); by default it is imported here.
    """
    cfg = dict(config or {})
    local_name = str(cfg.get("node_name") or hostname or socket.gethostname())
    try:
        declared = declared_nodes(cfg.get("declared"))
    except ValueError as exc:
        log.error("ignoring gpus.declared: %s", exc)
        declared = []
    local, why = _probe_nvml(nvml, local_name)
    if local is not None:
        others = [n for n in declared if n.name != local.name]
        source = "nvml+declared" if others else "nvml"
        return Inventory((local, *others), source)
    _warn_once(why, declared)
    return Inventory(tuple(declared), "declared" if declared else "none")


def _warn_once(why: str, declared: Sequence[NodeInventory]) -> None:
    global _warned
    if _warned:
        return
    _warned = True
    if declared:
        total = sum(n.count for n in declared)
        log.warning(
            "NVML unavailable (%s): using the declared GPU inventory from config gpus.declared "
            "(%d nodes, %d GPUs); no GPU device requests will be made, each job container's"
            " NVIDIA_VISIBLE_DEVICES names its declared GPU ids",
            why,
            len(declared),
            total,
        )
    else:
        log.warning(
            "NVML unavailable (%s) and no gpus.declared in config: the inventory is empty", why
        )


def declared_nodes(section: Any) -> list[NodeInventory]:
    """Parse ``{nodes: [{name, gpus, nvlink?, uuids?}]}``; raises ValueError naming the field."""
    if section is None:
        return []
    if not isinstance(section, Mapping) or not isinstance(section.get("nodes"), list):
        raise ValueError("gpus.declared must be {nodes: [{name: ..., gpus: N}, ...]}")
    out: list[NodeInventory] = []
    seen: set[str] = set()
    for i, item in enumerate(section["nodes"]):
        node = _declared_node(item, f"gpus.declared.nodes[{i}]")
        if node.name in seen:
            raise ValueError(f"gpus.declared.nodes[{i}].name {node.name!r} is repeated")
        seen.add(node.name)
        out.append(node)
    return out


def _declared_node(item: Any, where: str) -> NodeInventory:
    """One entry of ``gpus.declared.nodes``."""
    if not isinstance(item, Mapping):
        raise ValueError(f"{where} must be a mapping")
    name = item.get("name")
    count = item.get("gpus")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name must be a non-empty string")
    if isinstance(count, bool) or not isinstance(count, int) or count < 0:
        raise ValueError(f"{where}.gpus must be a non-negative integer")
    uuids = _uuids(item.get("uuids"), name, count, where)
    links = _link_matrix(item.get("links"), count, where)
    links.update(_groups(item.get("pcie") or [], count, f"{where}.pcie", Link.PCIE_SWITCH))
    links.update(_nvlink_groups(item.get("nvlink") or [], count, where))
    gpus = tuple(Gpu(k, str(u)) for k, u in enumerate(uuids))
    return NodeInventory(name, gpus, real=False, links=links)


_VISIBLE_WORDS = frozenset({"all", "none", "void"})  # NVIDIA_VISIBLE_DEVICES's keywords


def _uuids(raw: Any, name: str, count: int, where: str) -> list[str]:
    """``uuids``: one distinct id per GPU (what ``NVIDIA_VISIBLE_DEVICES`` will name), or
    absent for the stable ``FAKE-<node>-<index>``."""
    if raw is None:
        return [f"FAKE-{name}-{k}" for k in range(count)]
    if not isinstance(raw, list):
        raise ValueError(f"{where}.uuids must be a list of GPU UUIDs")
    if len(raw) != count:
        raise ValueError(f"{where}.uuids has {len(raw)} entries for {count} GPUs")
    for k, u in enumerate(raw):
        if (
            not isinstance(u, str)
            or not u
            or u.lower() in _VISIBLE_WORDS
            or u.isdigit()
            or any(c == "," or c.isspace() for c in u)
        ):
            raise ValueError(
                f"{where}.uuids[{k}] must be a GPU UUID (no comma, space, index or all/none/void)"
            )
    if len(set(raw)) != len(raw):
        raise ValueError(f"{where}.uuids repeats a UUID")
    return list(raw)


def _nvlink_groups(groups: Any, count: int, where: str) -> dict[tuple[int, int], Link]:
    """``nvlink: [[0, 1], [2, 3]]``: every pair inside a group is NVLinked."""
    return _groups(groups, count, f"{where}.nvlink", Link.NVLINK)


def _groups(groups: Any, count: int, where: str, link: Link) -> dict[tuple[int, int], Link]:
    """Every pair inside each group of ``groups`` (lists of GPU indices) is ``link`` apart."""
    links: dict[tuple[int, int], Link] = {}
    if not isinstance(groups, list):
        raise ValueError(f"{where} must be a list of lists of GPU indices")
    for group in groups:
        if not isinstance(group, list) or not all(
            isinstance(k, int) and not isinstance(k, bool) and 0 <= k < count for k in group
        ):
            raise ValueError(f"{where} groups must list GPU indices below {count}")
        for a in group:
            for b in group:
                if a < b:
                    links[(a, b)] = link
    return links


# ``nvidia-smi topo -m``'s words -> Link (NV<n>: n bonded NVLinks)
_TOPO_WORDS = {
    "X": Link.SAME,
    "NV": Link.NVLINK,
    "NVLINK": Link.NVLINK,
    "NVSWITCH": Link.NVLINK,
    "PIX": Link.PCIE_SWITCH,
    "PXB": Link.PCIE_SWITCH,
    "PHB": Link.HOST_BRIDGE,
    "NODE": Link.NUMA_NODE,
    "SYS": Link.SYSTEM,
}


def link_word(word: Any) -> Link | None:
    """One entry of a ``links`` matrix (``NV12``, ``PIX``, ``SYS``, ...) or None."""
    if not isinstance(word, str):
        return None
    w = word.strip().upper()
    if w.startswith("NV") and w[2:].isdigit():
        return Link.NVLINK
    return _TOPO_WORDS.get(w)


def _link_matrix(matrix: Any, count: int, where: str) -> dict[tuple[int, int], Link]:
    """``links``: a ``count`` x ``count`` matrix as ``nvidia-smi topo -m`` prints it."""
    if matrix is None:
        return {}
    if (
        not isinstance(matrix, list)
        or len(matrix) != count
        or not all(isinstance(row, list) and len(row) == count for row in matrix)
    ):
        raise ValueError(f"{where}.links must be a {count} x {count} matrix")
    links: dict[tuple[int, int], Link] = {}
    for a, row in enumerate(matrix):
        for b, word in enumerate(row):
            link = link_word(word)
            if link is None:
                raise ValueError(
                    f"{where}.links[{a}][{b}] is {word!r}: not one of X, NV<n>, PIX, PXB,"
                    " PHB, NODE, SYS"
                )
            if (a == b) != (link == Link.SAME):
                raise ValueError(f"{where}.links[{a}][{b}]: X is the diagonal, and only it")
            other = link_word(matrix[b][a])
            if other != link:
                raise ValueError(f"{where}.links is not symmetric at [{a}][{b}]")
            if a < b:
                links[(a, b)] = link
    return links


def _probe_nvml(nvml: Any | None, node_name: str) -> tuple[NodeInventory | None, str]:
    if nvml is None:
        try:
            import pynvml as nvml_mod
        except ImportError:
            return None, "pynvml is not installed"
        nvml = nvml_mod
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None, f"nvmlInit failed: {exc}"
    try:
        count = int(nvml.nvmlDeviceGetCount())
        if count == 0:
            return None, "NVML reports 0 GPUs"
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
        gpus = tuple(_gpu(nvml, i, h) for i, h in enumerate(handles))
        return NodeInventory(node_name, gpus, real=True, links=_nvml_links(nvml, handles)), ""
    except Exception as exc:
        return None, f"NVML query failed: {exc}"
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _gpu(nvml: Any, index: int, handle: Any) -> Gpu:
    uuid = _text(nvml.nvmlDeviceGetUUID(handle))
    try:
        name = _text(nvml.nvmlDeviceGetName(handle))
    except Exception:
        name = ""
    try:
        memory = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
    except Exception:
        memory = 0
    return Gpu(index, uuid, name, memory)


def _nvml_links(nvml: Any, handles: Sequence[Any]) -> dict[tuple[int, int], Link]:
    links: dict[tuple[int, int], Link] = {}
    for a in range(len(handles)):
        for b in range(a + 1, len(handles)):
            try:
                level = int(nvml.nvmlDeviceGetTopologyCommonAncestor(handles[a], handles[b]))
                links[(a, b)] = _NVML_LEVEL.get(level, Link.SYSTEM)
            except Exception as exc:
                log.debug("topology %d-%d unknown: %s", a, b, exc)
    # NVLink overrides the PCIe level: read each device's active links and map peers by bus id.
    bus_to_index: dict[str, int] = {}
    for i, h in enumerate(handles):
        try:
            bus_to_index[_bus_id(nvml.nvmlDeviceGetPciInfo(h))] = i
        except Exception:
            continue
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    enabled = getattr(nvml, "NVML_FEATURE_ENABLED", 1)
    for a, h in enumerate(handles):
        for link in range(max_links):
            try:
                if nvml.nvmlDeviceGetNvLinkState(h, link) != enabled:
                    continue
                peer = bus_to_index.get(_bus_id(nvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link)))
            except Exception:
                break  # link index past what this GPU has, or NVLink unsupported
            if peer is not None and peer != a:
                links[(min(a, peer), max(a, peer))] = Link.NVLINK
    return links


def _bus_id(pci: Any) -> str:
    bus = _text(getattr(pci, "busId", pci)).lower()
    # NVML pads the domain to 8 digits in some calls and 4 in others: compare the tail.
    return bus[-12:]


# ---------------------------------------------------------------- per-round GPU samples


class GpuSampler:
    """Per-round samples of the host's GPUs for the agent (``flowcon.core.gpu_usage``).

    NVML is initialised once and kept; where it is absent (no pynvml, no driver, no GPU)
    ``available`` is False, ``reason`` says why (logged once) and ``sample`` returns None,
    so the agent goes on measuring CPU only. ``nvml`` is the pynvml module (tests inject a
    fake). Per-process SM utilisation comes from ``nvmlDeviceGetProcessUtilization``: the
    samples since the previous call, averaged per process; where the driver keeps none (or
    does not support it) a process's ``sm_util`` is None.
    """

    def __init__(self, nvml: Any | None = None, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or time.monotonic
        self._nvml: Any = None
        self._handles: list[Any] = []
        self._uuids: list[str] = []
        self._totals: list[int] = []
        self._last_ts: list[int] = []
        self.reason = ""
        if nvml is None:
            try:
                import pynvml as nvml_mod
            except ImportError:
                self._off("pynvml is not installed")
                return
            nvml = nvml_mod
        try:
            nvml.nvmlInit()
        except Exception as exc:
            self._off(f"nvmlInit failed: {exc}")
            return
        try:
            count = int(nvml.nvmlDeviceGetCount())
            self._handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self._uuids = [_text(nvml.nvmlDeviceGetUUID(h)) for h in self._handles]
            self._totals = [int(nvml.nvmlDeviceGetMemoryInfo(h).total) for h in self._handles]
        except Exception as exc:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            self._off(f"NVML query failed: {exc}")
            return
        if not self._handles:
            with contextlib.suppress(Exception):
                nvml.nvmlShutdown()
            self._off("NVML reports 0 GPUs")
            return
        self._nvml = nvml
        self._last_ts = [0] * len(self._handles)

    def _off(self, why: str) -> None:
        self.reason = why
        log.warning("GPU measurement off: %s; the agent measures and controls CPU only", why)

    @property
    def available(self) -> bool:
        return self._nvml is not None

    @property
    def count(self) -> int:
        return len(self._handles)

    def close(self) -> None:
        if self._nvml is not None:
            with contextlib.suppress(Exception):
                self._nvml.nvmlShutdown()
            self._nvml = None

    def sample(self) -> GpuSample | None:
        """A ``flowcon.core.gpu_usage.GpuSample`` of every GPU, or None (NVML off, or this
        sample failed: logged, and tried again next round)."""
        nvml = self._nvml
        if nvml is None:
            return None
        devices: list[GpuDevice] = []
        procs: list[GpuProcess] = []
        try:
            for i, h in enumerate(self._handles):
                devices.append(self._device(i, h))
                sm = self._process_util(i, h)
                for p in nvml.nvmlDeviceGetComputeRunningProcesses(h):
                    mem = getattr(p, "usedGpuMemory", None)
                    pid = int(p.pid)
                    procs.append(GpuProcess(pid, i, int(mem or 0), sm.get(pid)))
        except Exception as exc:
            log.warning("GPU sample failed: %s", exc)
            return None
        return GpuSample(float(self._clock()), tuple(devices), tuple(procs))

    def _device(self, i: int, h: Any) -> GpuDevice:
        nvml = self._nvml
        try:
            util: float | None = float(nvml.nvmlDeviceGetUtilizationRates(h).gpu) / 100.0
        except Exception:
            util = None
        mem = nvml.nvmlDeviceGetMemoryInfo(h)
        return GpuDevice(i, self._uuids[i], util, int(mem.used), int(mem.total))

    def _process_util(self, i: int, h: Any) -> dict[int, float]:
        """pid -> mean SM utilisation (a fraction) of the samples since the last call."""
        try:
            samples = self._nvml.nvmlDeviceGetProcessUtilization(h, self._last_ts[i])
        except Exception:  # NVML_ERROR_NOT_FOUND (no samples yet), NOT_SUPPORTED, ...
            return {}
        sums: dict[int, list[float]] = {}
        for s in samples:
            self._last_ts[i] = max(self._last_ts[i], int(s.timeStamp))
            sums.setdefault(int(s.pid), []).append(float(s.smUtil))
        return {pid: min(100.0, sum(v) / len(v)) / 100.0 for pid, v in sums.items() if v}
