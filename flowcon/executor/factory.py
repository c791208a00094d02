"""``make_executor``: an ``Executor`` on the backend the config's ``executor`` section names.

It lives beside the backends, not in ``flowcon.executor.lifecycle``, so the executor never
imports a backend and the backends never import the executor.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

from flowcon.executor.backend import Backend
from flowcon.executor.backends.engine import EngineBackend
from flowcon.executor.backends.swarm import SwarmBackend
from flowcon.executor.lifecycle import Executor, ExecutorOptions
from flowcon.executor.node_hosts import parse_node_hosts
from flowcon.executor.reach import Reach

if TYPE_CHECKING:
    from docker import DockerClient

    from flowcon.engine.gpus import Inventory

# The config's ``executor`` section as the YAML gave it, read key by key below.
ExecutorConfig = Mapping[str, Any]


def make_backend(
    config: ExecutorConfig | None = None, client: DockerClient | None = None
) -> Backend:
    """``engine`` (default; ``network``: auto|host|<network name>) or ``swarm``."""
    cfg = dict(config or {})
    kind = str(cfg.get("backend", "engine"))
    if kind == "engine":
        return EngineBackend(client=client, network=str(cfg.get("network", "auto")))
    if kind == "swarm":
        # unix://, ssh:// or tcp:// with mutual TLS only: ValueError naming the entry
        hosts = parse_node_hosts(cfg.get("node_hosts"), cfg.get("node_tls"))
        return SwarmBackend(
            client=client,
            node_hosts=hosts,
            allow_weak_hardening=bool(cfg.get("allow_weak_hardening", False)),
        )
    raise ValueError(f"executor.backend must be 'engine' or 'swarm', not {kind!r}")


def make_executor(
    config: ExecutorConfig | None = None,
    inventory: Inventory | None = None,
    client: object | None = None,  # a docker.DockerClient (build_target holds it as object)
    extra_labels: Mapping[str, str] | None = None,
) -> Executor:
    """Build an executor from the ``executor`` config section.

    ``{backend: engine|swarm, grace_s: 30, max_restarts: 3, checkpoint_every: null,
    checkpoint_host_dir: null, network: auto|host|<network name>, labels: {},
    leave_timeout_s: 60, bind_roots: [], images: ["*"], cap_add: [], pids_limit: 4096,
    node_hosts: {}, node_tls: null, allow_weak_hardening: false}``;
    ``extra_labels`` (a test's) are added to the config's ``labels``.
    """
    cfg = dict(config or {})
    opts = ExecutorOptions(
        grace_s=float(cfg.get("grace_s", 30.0)),
        max_restarts=int(cfg.get("max_restarts", 3)),
        checkpoint_every=cfg.get("checkpoint_every"),
        checkpoint_host_dir=cfg.get("checkpoint_host_dir"),
        extra_labels={**dict(cfg.get("labels") or {}), **dict(extra_labels or {})},
        leave_timeout_s=float(cfg.get("leave_timeout_s", 60.0)),
        reach=Reach.from_config(cfg),
    )
    return Executor(make_backend(cfg, cast("DockerClient | None", client)), inventory, opts)
