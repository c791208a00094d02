"""A thin adapter around the Docker SDK: the few engine calls the agent makes.

Every call maps the SDK's errors onto two of ours, so callers handle exactly two
situations: the container is gone (``ContainerGone``) or the engine does not answer
(``EngineUnavailable``). The client is stateless HTTP over the socket, so after an
engine restart the next call simply connects again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any

import docker
import docker.errors
import requests.exceptions

log = logging.getLogger(__name__)

# Pinned instead of negotiated so that building a client never needs the engine up.
API_VERSION = "1.41"


class EngineError(RuntimeError):
    """The engine refused a request."""


class EngineUnavailable(EngineError):
    """The engine does not answer (stopped, restarting, socket missing)."""


class ContainerGone(EngineError):
    """The container was removed (docker.errors.NotFound)."""


@dataclass(frozen=True)
class CpuSettings:
    """A container's CPU limits as HostConfig holds them."""

    nano_cpus: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    cpu_shares: int = 0

    @classmethod
    def from_host_config(cls, hc: dict[str, Any]) -> CpuSettings:
        return cls(
            int(hc.get("NanoCpus") or 0),
            int(hc.get("CpuQuota") or 0),
            int(hc.get("CpuPeriod") or 0),
            int(hc.get("CpuShares") or 0),
        )

    @property
    def quota_mode(self) -> bool:
        """Set with --cpu-quota/--cpu-period: the engine then refuses NanoCpus updates."""
        return self.cpu_quota > 0 or self.cpu_period > 0

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    labels: dict[str, str]
    running: bool
    cpu: CpuSettings | None = None  # only from inspect


@dataclass(frozen=True)
class Stats:
    at: float  # time.monotonic() when read
    cpu_ns: int  # cumulative CPU time of the container
    mem_bytes: int
    blk_read: int
    blk_write: int
    net_rx: int
    net_tx: int


def _wrap(exc: Exception, what: str) -> EngineError:
    if isinstance(exc, docker.errors.NotFound):
        return ContainerGone(f"{what}: container gone")
    if isinstance(
        exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout | ConnectionError
    ):
        return EngineUnavailable(f"{what}: engine unavailable ({exc.__class__.__name__})")
    if isinstance(exc, docker.errors.APIError):
        return EngineError(f"{what}: {exc.explanation or exc}")
    if isinstance(exc, docker.errors.DockerException):
        return EngineUnavailable(f"{what}: {exc}")
    return EngineError(f"{what}: {exc!r}")


class DockerEngine:
    def __init__(self, base_url: str | None = None, timeout: float = 15.0) -> None:
        kwargs: dict[str, Any] = docker.utils.kwargs_from_env()
        if base_url:
            kwargs["base_url"] = base_url
        kwargs.setdefault("base_url", "unix:///var/run/docker.sock")
        self.base_url: str = kwargs["base_url"]
        # Many stats calls run in parallel (each waits for the engine's 1 s stats tick).
        self._kwargs = {**kwargs, "version": API_VERSION, "timeout": timeout, "max_pool_size": 48}
        self.api = docker.APIClient(**self._kwargs)
        self.api.trust_env = False  # no proxy/netrc lookups per request: a third less CPU
        self._events_client: docker.APIClient | None = None

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # mapped onto our three error types
            raise _wrap(exc, what) from exc

    def ping(self) -> bool:
        try:
            return bool(self.api.ping())
        except Exception:
            return False

    def ncpu(self) -> int:
        return int(self._call("info", self.api.info).get("NCPU") or 0)

    def list_running(self) -> list[ContainerInfo]:
        rows = self._call("list", self.api.containers, filters={"status": "running"})
        return [
            ContainerInfo(
                row["Id"],
                (row.get("Names") or ["/?"])[0].lstrip("/"),
                row.get("Labels") or {},
                True,
            )
            for row in rows
        ]

    def inspect(self, cid: str) -> ContainerInfo:
        data = self._call(f"inspect {cid[:12]}", self.api.inspect_container, cid)
        return ContainerInfo(
            data["Id"],
            data.get("Name", "/?").lstrip("/"),
            (data.get("Config") or {}).get("Labels") or {},
            bool((data.get("State") or {}).get("Running")),
            CpuSettings.from_host_config(data.get("HostConfig") or {}),
        )

    def update_cpu(self, cid: str, body: dict[str, int]) -> None:
        """POST /containers/{id}/update with HostConfig CPU fields (NanoCpus, CpuQuota, ...).

        The SDK's update() has no nano_cpus argument, so we post the body ourselves.
        """

        def post() -> Any:
            resp = self.api._post_json(self.api._url("/containers/{0}/update", cid), data=body)
            return self.api._result(resp, True)

        self._call(f"update {cid[:12]}", post)

    def stats(self, cid: str) -> Stats:
        data = self._call(f"stats {cid[:12]}", self.api.stats, cid, stream=False, one_shot=True)
        at = time.monotonic()
        cpu = ((data.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage") or 0
        mem = (data.get("memory_stats") or {}).get("usage") or 0
        blk_r = blk_w = 0
        for row in (data.get("blkio_stats") or {}).get("io_service_bytes_recursive") or []:
            op = str(row.get("op", "")).lower()
            if op == "read":
                blk_r += int(row.get("value") or 0)
            elif op == "write":
                blk_w += int(row.get("value") or 0)
        rx = tx = 0
        for net in (data.get("networks") or {}).values():
            rx += int(net.get("rx_bytes") or 0)
            tx += int(net.get("tx_bytes") or 0)
        return Stats(at, int(cpu), int(mem), blk_r, blk_w, rx, tx)

    def log_frames(self, cid: str, since_ns: int | None, tail: int | None) -> Iterator[bytes]:
        """New output frames (stdout and stderr), each prefixed with its RFC 3339 timestamp.

        ``since_ns``: only lines from that time on (the engine's resolution is finer than
        a float's, so callers drop lines at or before their last timestamp themselves).
        """
        kwargs: dict[str, Any] = {"stream": True, "follow": False, "timestamps": True}
        if since_ns:
            # One millisecond early: float rounding must not skip a line.
            kwargs["since"] = max(since_ns / 1e9 - 0.001, 1e-6)
        elif tail is not None:
            kwargs["tail"] = tail
        stream = self._call(f"logs {cid[:12]}", self.api.logs, cid, **kwargs)
        try:
            yield from stream
        except Exception as exc:
            raise _wrap(exc, f"logs {cid[:12]}") from exc

    def events(self) -> Any:
        """A closable stream of decoded container events (a fresh connection each time)."""
        if self._events_client is not None:
            self._events_client.close()  # the previous, broken connection
        client = docker.APIClient(**{**self._kwargs, "timeout": None})
        client.trust_env = False
        self._events_client = client
        return self._call("events", client.events, decode=True, filters={"type": "container"})

    def close(self) -> None:
        self.api.close()
        if self._events_client is not None:
            self._events_client.close()
