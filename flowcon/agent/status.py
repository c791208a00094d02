"""Live figures for ``flowcon status``: what the engine says now, next to the agent's state.

``docker stats``-style CPU % (of one CPU) and memory come from the engine's stats
(two samples a second apart, all containers in parallel); the applied CPU limit from
inspect. When the engine does not answer, the caller shows the state file alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from flowcon.engine.docker_engine import (
    ContainerGone,
    DockerEngine,
    EngineError,
    EngineUnavailable,
)


@dataclass
class Live:
    running: bool
    cpus_limit: float | None = None  # applied now (NanoCpus or quota/period); None: no limit
    cpu_percent: float | None = None  # of one CPU, as docker stats
    mem_bytes: int | None = None
    mem_limit: int | None = None
    net_rx: int | None = None
    net_tx: int | None = None
    blk_read: int | None = None
    blk_write: int | None = None
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _one(engine: DockerEngine, cid: str) -> Live:
    try:
        info = engine.inspect(cid)
    except ContainerGone:
        return Live(running=False, error="gone")
    cpus = info.cpu.cpus if info.cpu else None
    if not info.running:
        return Live(running=False, cpus_limit=cpus)
    try:
        s = engine.live_stats(cid)
    except ContainerGone:
        return Live(running=False, error="gone")
    except EngineUnavailable:
        raise
    except EngineError as exc:
        return Live(running=True, cpus_limit=cpus, error=str(exc))
    return Live(
        True,
        cpus,
        s.cpu_percent,
        s.mem_bytes,
        s.mem_limit,
        s.net_rx,
        s.net_tx,
        s.blk_read,
        s.blk_write,
    )


def live_figures(engine: DockerEngine, cids: Iterable[str]) -> tuple[dict[str, Live], str | None]:
    """Per container id its live figures; or ({}, reason) when the engine does not answer."""
    ids = list(cids)
    try:
        engine.ncpu()  # fails fast when the engine is down, before 50 parallel calls
        if not ids:
            return {}, None
        with ThreadPoolExecutor(max_workers=min(32, len(ids))) as pool:
            found = list(pool.map(lambda c: _one(engine, c), ids))
    except EngineUnavailable as exc:
        return {}, str(exc)
    except EngineError as exc:
        return {}, str(exc)
    return dict(zip(ids, found, strict=True)), None
