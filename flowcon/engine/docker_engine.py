"""A thin adapter around the Docker engine API: the few calls the agent makes.

Every call maps failures onto two situations callers handle: the container is gone
(``ContainerGone``) or the engine does not answer (``EngineUnavailable``); anything
else the engine refuses is an ``EngineError``. The per-round calls (list, logs,
update) go over kept-alive ``http.client`` connections (see transport.py); CPU time
and memory come from the container's cgroup files when reachable (cgroups.py), the
engine's stats otherwise. Only the long-lived event stream uses the Docker SDK.
After an engine restart the next call simply connects again.

The API version is negotiated, never pinned (api_version.py): the first call on a
connection asks ``GET /version`` and speaks the newest version both sides know; a new
negotiation follows a reconnect and an engine's "client version X is too old/new".

A Swarm task's container carries its service's id, not the service's labels (where
``deploy.labels`` puts them): those are read from ``GET /services/{id}`` (cached per
service) and merged under the container's own, as Traefik does.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from typing import Any
from urllib.parse import quote

import docker
import docker.errors
import docker.utils
import requests.exceptions

from flowcon.core.control import SHARES_PER_CPU, AppliedMode, CpuControl
from flowcon.core.cpusets import all_cores
from flowcon.core.labels import SERVICE_ID, merge_service_labels
from flowcon.core.limits import NANO, CpuLimit
from flowcon.engine.api_version import (
    MIN_API,
    EngineVersion,
    UnsupportedEngine,
    is_wrong_version,
    negotiate,
)
from flowcon.engine.cgroups import CgroupFiles, CgroupFormatError, CgroupReader
from flowcon.engine.logs import Line, demux_frames, read_lines
from flowcon.engine.transport import SdkTransport, Transport, Unreachable, direct_transport

log = logging.getLogger(__name__)

# How long a Swarm service's labels are reused before they are read again.
SERVICE_LABELS_TTL = 30.0


class EngineError(RuntimeError):
    """The engine refused a request."""


class EngineUnavailable(EngineError):
    """The engine does not answer (stopped, restarting, socket missing)."""


class EngineVersionError(EngineError):
    """The engine's API versions and FlowCon's do not meet."""


class ContainerGone(EngineError):
    """The container was removed (HTTP 404 on its endpoints)."""


@dataclass(frozen=True)
class CpuSettings:
    """A container's CPU limits as HostConfig holds them."""

    nano_cpus: int = 0
    cpu_quota: int = 0
    cpu_period: int = 0
    cpu_shares: int = 0
    cpuset_cpus: str = ""  # "" : all cores

    @classmethod
    def from_host_config(cls, hc: dict[str, Any]) -> CpuSettings:
        return cls(
            int(hc.get("NanoCpus") or 0),
            int(hc.get("CpuQuota") or 0),
            int(hc.get("CpuPeriod") or 0),
            int(hc.get("CpuShares") or 0),
            str(hc.get("CpusetCpus") or ""),
        )

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> CpuSettings:
        """From ``to_dict`` (a state file); keys missing in older files take defaults."""
        return cls(
            int(data.get("nano_cpus") or 0),
            int(data.get("cpu_quota") or 0),
            int(data.get("cpu_period") or 0),
            int(data.get("cpu_shares") or 0),
            str(data.get("cpuset_cpus") or ""),
        )

    @property
    def quota_mode(self) -> bool:
        """Set with --cpu-quota/--cpu-period: the engine then refuses NanoCpus updates."""
        return self.cpu_quota > 0 or self.cpu_period > 0

    @property
    def cpus(self) -> float | None:
        """The limit in CPUs, None when there is none."""
        if self.nano_cpus:
            return self.nano_cpus / 1e9
        if self.cpu_quota > 0:
            return self.cpu_quota / (self.cpu_period or 100_000)
        return None

    def to_dict(self) -> dict[str, int | str]:
        return asdict(self)


@dataclass(frozen=True)
class ContainerInfo:
    id: str
    name: str
    labels: dict[str, str]
    running: bool
    cpu: CpuSettings | None = None  # only from inspect
    cgroup_parent: str = ""  # only from inspect: where to find its cgroup files
    pid: int = 0  # only from inspect


@dataclass(frozen=True)
class Stats:
    at: float  # time.monotonic() when read
    cpu_ns: int  # cumulative CPU time of the container
    mem_bytes: int
    blk_read: int
    blk_write: int
    net_rx: int
    net_tx: int


@dataclass(frozen=True)
class CgroupSample:
    at: float  # time.monotonic() when read
    cpu_ns: int
    mem_bytes: int | None


@dataclass(frozen=True)
class LiveStats:
    """What ``docker stats`` shows for one container."""

    cpu_percent: float | None  # of one CPU, as docker stats (200% = two CPUs busy)
    mem_bytes: int
    mem_limit: int
    blk_read: int
    blk_write: int
    net_rx: int
    net_tx: int


def parse_stats(data: dict[str, Any], at: float) -> Stats:
    """The engine's stats document (one sample)."""
    cpu = ((data.get("cpu_stats") or {}).get("cpu_usage") or {}).get("total_usage") or 0
    mem = (data.get("memory_stats") or {}).get("usage") or 0
    blk_r, blk_w, rx, tx = _io(data)
    return Stats(at, int(cpu), int(mem), blk_r, blk_w, rx, tx)


def _io(data: dict[str, Any]) -> tuple[int, int, int, int]:
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
    return blk_r, blk_w, rx, tx


def docker_stats_figures(data: dict[str, Any]) -> LiveStats:
    """CPU % and memory as the docker CLI computes them from a non-one-shot stats
    document (``cpu_stats`` against ``precpu_stats``; memory without inactive page cache)."""
    cpu = data.get("cpu_stats") or {}
    pre = data.get("precpu_stats") or {}
    usage = (cpu.get("cpu_usage") or {}).get("total_usage") or 0
    pre_usage = (pre.get("cpu_usage") or {}).get("total_usage") or 0
    system = cpu.get("system_cpu_usage") or 0
    pre_system = pre.get("system_cpu_usage") or 0
    online = cpu.get("online_cpus") or len((cpu.get("cpu_usage") or {}).get("percpu_usage") or [])
    pct: float | None = None
    if system > pre_system and pre_system and usage >= pre_usage:
        pct = (usage - pre_usage) / (system - pre_system) * max(int(online), 1) * 100.0
        if not math.isfinite(pct):
            pct = None
    mem = data.get("memory_stats") or {}
    used = int(mem.get("usage") or 0)
    extra = mem.get("stats") or {}
    for key in ("total_inactive_file", "inactive_file"):
        if key in extra and int(extra[key] or 0) < used:
            used -= int(extra[key] or 0)
            break
    blk_r, blk_w, rx, tx = _io(data)
    return LiveStats(pct, used, int(mem.get("limit") or 0), blk_r, blk_w, rx, tx)


DEFAULT_PERIOD = 100_000  # µs, the kernel's default CFS period


def cpu_body(limit: CpuLimit, original: CpuSettings) -> dict[str, int]:
    """The update request for a CPU limit, in the form the container already has: a
    container started with --cpu-quota keeps quota and period (the engine refuses
    NanoCpus next to them), any other gets NanoCpus."""
    if original.quota_mode:
        period = original.cpu_period or DEFAULT_PERIOD
        quota = -1 if limit.unlimited else max(1000, int(limit.cpus * period))
        return {"CpuPeriod": period, "CpuQuota": quota}
    return {"NanoCpus": limit.nano_cpus}


def shares_back(original: CpuSettings) -> int:
    """The CPU weight to give back: the original, or Docker's default when it had none."""
    return original.cpu_shares or SHARES_PER_CPU


def cpuset_back(original: CpuSettings, host_cpus: int) -> str:
    """The cores to give back: the original set, or all cores when it had none (the
    engine reads an empty CpusetCpus in an update as "no change")."""
    return original.cpuset_cpus or all_cores(host_cpus)


def weight_body(
    shares: int, original: CpuSettings, host_cpus: int, cap: CpuLimit | None = None
) -> dict[str, int | str]:
    """The update request for CPU weights: ``CpuShares`` and the quota lifted (the whole
    host, or quota -1 for a container started with --cpu-quota), or set to ``cap``
    (the container's cpus.max label) when given."""
    body: dict[str, int | str] = dict(cpu_body(cap or CpuLimit(host_cpus, True), original))
    body["CpuShares"] = shares
    return body


def cpuset_body(cpuset: str) -> dict[str, int | str]:
    """The update request that pins a container to cores ("0-1", "2,3")."""
    return {"CpusetCpus": cpuset}


def control_body(
    control: CpuControl, original: CpuSettings, host_cpus: int, previous: AppliedMode | None
) -> dict[str, int | str]:
    """The update request for ``control``; what ``previous`` (the mode applied before,
    None: the originals) changed and this mode does not set goes back to the original."""
    body: dict[str, int | str]
    if control.mode == "quota":
        body = dict(cpu_body(control.target, original))
        if previous in ("weights", "cpuset"):
            body["CpuShares"] = shares_back(original)
    else:
        assert control.shares is not None
        body = weight_body(control.shares, original, host_cpus, control.cap)
    if control.mode == "cpuset":
        assert control.cpuset is not None
        body.update(cpuset_body(control.cpuset))
    elif previous == "cpuset":
        body["CpusetCpus"] = cpuset_back(original, host_cpus)
    return body


def restore_body(
    original: CpuSettings, host_cpus: int, mode: AppliedMode = "quota"
) -> dict[str, int | str]:
    """The update request that gives a container back its original CPU settings
    (``mode``: what the agent applied last; weights and cpusets go back too)."""
    body: dict[str, int | str]
    if original.quota_mode:
        body = {
            "CpuPeriod": original.cpu_period or DEFAULT_PERIOD,
            "CpuQuota": original.cpu_quota if original.cpu_quota > 0 else -1,
        }
    else:
        # The engine ignores NanoCpus=0, so "no limit" goes back as the whole host.
        body = {"NanoCpus": original.nano_cpus or host_cpus * NANO}
    if original.cpu_shares or mode != "quota":
        body["CpuShares"] = shares_back(original)
    if mode == "cpuset":
        body["CpusetCpus"] = cpuset_back(original, host_cpus)
    return body


def _since_param(since_ns: int) -> str:
    """The engine reads ``seconds.nanoseconds`` exactly (no float rounding)."""
    return f"{since_ns // 1_000_000_000}.{since_ns % 1_000_000_000:09d}"


def _message(body: bytes) -> str:
    try:
        data = json.loads(body)
        if isinstance(data, dict) and data.get("message"):
            return str(data["message"])
    except ValueError:
        pass
    return body[:200].decode("utf-8", "replace").strip()


class DockerEngine:
    def __init__(
        self,
        base_url: str | None = None,
        timeout: float = 15.0,
        cgroup_root: str | None = "/sys/fs/cgroup",
        pool_size: int = 48,
    ) -> None:
        kwargs: dict[str, Any] = dict(docker.utils.kwargs_from_env())
        if base_url:
            kwargs["base_url"] = base_url
        kwargs.setdefault("base_url", "unix:///var/run/docker.sock")
        self.base_url: str = kwargs["base_url"]
        # The SDK client (TLS hosts, the event stream) is given a version so that building
        # it never asks the engine; every path we send carries the negotiated one.
        self._kwargs = {**kwargs, "version": MIN_API, "timeout": timeout}
        direct = None if kwargs.get("tls") else direct_transport(self.base_url, timeout, pool_size)
        self.http: Transport
        if direct is not None:
            self.http = direct
        else:
            api = docker.APIClient(**self._kwargs, max_pool_size=pool_size)
            api.trust_env = False  # no proxy/netrc lookups per request
            self.http = SdkTransport(api)
        self._events_client: docker.APIClient | None = None
        self.cgroups = CgroupReader(cgroup_root) if cgroup_root else None
        self._cg_files: dict[str, CgroupFiles | None] = {}
        self._cg_lock = threading.Lock()
        self._version: EngineVersion | None = None  # None: to be negotiated
        self._last_version: EngineVersion | None = None
        self._version_lock = threading.Lock()
        self._reconnects_seen = 0
        self._services: dict[str, tuple[float, dict[str, str]]] = {}
        self._services_lock = threading.Lock()
        self._services_unreadable: set[str] = set()

    # ----- plumbing ---------------------------------------------------------------------

    def _unavailable(self, what: str, exc: Exception) -> EngineUnavailable:
        self._forget_version()  # it may come back as another engine
        return EngineUnavailable(f"{what}: {self.cannot_connect(exc)}")

    def cannot_connect(self, why: object) -> str:
        return f"cannot connect to the Docker engine at {self.base_url}: {why}"

    def _forget_version(self) -> None:
        with self._version_lock:
            self._version = None

    def version(self) -> EngineVersion:
        """The negotiated API version (asked once per connection: again after a reconnect)."""
        with self._version_lock:
            if self._version is not None and self.http.reconnects == self._reconnects_seen:
                return self._version
            try:
                with self.http.open("GET", "/version") as resp:
                    status, data = resp.status, resp.read()
            except Unreachable as exc:
                raise EngineUnavailable(f"version: {self.cannot_connect(exc)}") from exc
            if status >= 400:
                raise EngineError(f"version: {status} {_message(data)}")
            try:
                answer = json.loads(data)
                found = negotiate(answer, self.base_url)
            except ValueError as exc:  # UnsupportedEngine, or no JSON
                if isinstance(exc, UnsupportedEngine):
                    raise EngineVersionError(str(exc)) from None
                raise EngineError(f"version: engine sent no JSON ({exc})") from exc
            if found != self._last_version:  # the first at DEBUG: the agent says it at start
                log.log(
                    logging.INFO if self._last_version else logging.DEBUG,
                    "Docker engine at %s: Docker %s, API %s (min %s); speaking API %s",
                    self.base_url,
                    found.version,
                    found.engine_api,
                    found.engine_min_api or "?",
                    found.api,
                )
            self._version, self._reconnects_seen = found, self.http.reconnects
            self._last_version = found
            return found

    def _path(self, path: str) -> str:
        return f"/v{self.version().api}{path}"

    def _request(self, method: str, path: str, what: str, body: Any = None) -> Any:
        raw = None if body is None else json.dumps(body).encode()
        for attempt in (0, 1):
            try:
                with self.http.open(method, self._path(path), raw) as resp:
                    status, data = resp.status, resp.read()
            except Unreachable as exc:
                raise self._unavailable(what, exc) from exc
            if status == 400 and not attempt and is_wrong_version(_message(data)):
                # Another engine answers now (upgraded in place): negotiate, send again.
                log.info("%s: engine says %r: negotiating again", what, _message(data))
                self._forget_version()
                continue
            break
        if status >= 400:
            raise self._error(status, data, what, path)
        if not data:
            return None
        try:
            return json.loads(data)
        except ValueError as exc:
            raise EngineError(f"{what}: engine sent no JSON ({exc})") from exc

    @staticmethod
    def _error(status: int, body: bytes, what: str, path: str) -> EngineError:
        msg = _message(body)
        if (
            status == 404
            and path.startswith("/containers/")
            and not path.startswith("/containers/json")
        ):
            return ContainerGone(f"{what}: container gone ({msg})")
        if is_wrong_version(msg):
            return EngineVersionError(f"{what}: {status} {msg}")
        return EngineError(f"{what}: {status} {msg}")

    def _labels(self, labels: dict[str, str]) -> dict[str, str]:
        """A container's labels, with its Swarm service's under them (container wins)."""
        sid = labels.get(SERVICE_ID)
        if not sid:
            return labels
        return merge_service_labels(labels, self.service_labels(sid))

    def service_labels(self, sid: str) -> dict[str, str]:
        """A Swarm service's own labels (``deploy.labels``), cached SERVICE_LABELS_TTL
        seconds; empty (logged once) where they cannot be read, e.g. on a worker node,
        which the engine does not tell about services."""
        now = time.monotonic()
        with self._services_lock:
            hit = self._services.get(sid)
        if hit is not None and now - hit[0] < SERVICE_LABELS_TTL:
            return hit[1]
        try:
            data = self._request("GET", f"/services/{quote(sid)}", f"service {sid[:12]}")
            labels = (data.get("Spec") or {}).get("Labels") or {} if isinstance(data, dict) else {}
            labels = {str(k): str(v) for k, v in labels.items()}
        except EngineUnavailable:
            raise
        except EngineError as exc:
            if sid not in self._services_unreadable:
                self._services_unreadable.add(sid)
                log.warning(
                    "labels of swarm service %s not readable (%s): its tasks have their "
                    "container labels only",
                    sid[:12],
                    exc,
                )
            labels = {}
        with self._services_lock:
            for old in [
                k for k, (at, _) in self._services.items() if now - at >= SERVICE_LABELS_TTL
            ]:
                del self._services[old]  # services gone meanwhile do not pile up
            self._services[sid] = (now, labels)
        return labels

    # ----- calls ------------------------------------------------------------------------

    def ping(self) -> bool:
        try:
            with self.http.open("GET", "/_ping") as resp:
                return resp.status == 200 and resp.read() == b"OK"
        except Unreachable:
            return False

    def ncpu(self) -> int:
        return int((self._request("GET", "/info", "info") or {}).get("NCPU") or 0)

    def list_running(self) -> list[ContainerInfo]:
        filters = quote(json.dumps({"status": ["running"]}))
        rows = self._request("GET", f"/containers/json?filters={filters}", "list") or []
        return [
            ContainerInfo(
                row["Id"],
                (row.get("Names") or ["/?"])[0].lstrip("/"),
                self._labels(row.get("Labels") or {}),
                True,
            )
            for row in rows
            if isinstance(row, dict) and row.get("Id")
        ]

    def inspect(self, cid: str) -> ContainerInfo:
        data = self._request("GET", f"/containers/{cid}/json", f"inspect {cid[:12]}")
        if not isinstance(data, dict) or not data.get("Id"):
            raise EngineError(f"inspect {cid[:12]}: unexpected answer")
        state = data.get("State") or {}
        hc = data.get("HostConfig") or {}
        return ContainerInfo(
            data["Id"],
            str(data.get("Name") or "/?").lstrip("/"),
            self._labels((data.get("Config") or {}).get("Labels") or {}),
            bool(state.get("Running")),
            CpuSettings.from_host_config(hc),
            str(hc.get("CgroupParent") or ""),
            int(state.get("Pid") or 0),
        )

    def update_cpu(self, cid: str, body: dict[str, int | str]) -> None:
        """POST /containers/{id}/update with HostConfig CPU fields (NanoCpus, CpuQuota, ...).
        (The SDK's update() has no nano_cpus argument.)"""
        self._request("POST", f"/containers/{cid}/update", f"update {cid[:12]}", body)

    def restart(self, cid: str, stop_timeout_s: int = 30) -> None:
        """POST /containers/{id}/restart: SIGTERM (a flowcon.elastic job checkpoints and
        exits), then SIGKILL after ``stop_timeout_s``, then the same container starts again
        (the agent's way to apply a GPU share at a checkpoint-restart)."""
        self._request(
            "POST", f"/containers/{cid}/restart?t={int(stop_timeout_s)}", f"restart {cid[:12]}"
        )

    def set_cpus(self, cid: str, limit: CpuLimit, original: CpuSettings) -> None:
        """Limit a container to ``limit`` (``original``: its settings before the agent)."""
        self.update_cpu(cid, dict(cpu_body(limit, original)))

    def set_control(
        self,
        cid: str,
        control: CpuControl,
        original: CpuSettings,
        host_cpus: int,
        previous: AppliedMode | None,
    ) -> None:
        """Apply ``control`` (quota, weights or cpuset; ``previous``: the mode applied
        before, whose settings this one does not set go back to ``original``)."""
        self.update_cpu(cid, control_body(control, original, host_cpus, previous))

    def restore_cpus(
        self, cid: str, original: CpuSettings, host_cpus: int, mode: AppliedMode = "quota"
    ) -> None:
        """Give a container back its ``original`` CPU settings (``mode``: applied last)."""
        self.update_cpu(cid, restore_body(original, host_cpus, mode))

    def stats(self, cid: str) -> Stats:
        """One sample from the engine (answers on its next one-second tick)."""
        path = f"/containers/{cid}/stats?stream=false&one-shot=true"
        data = self._request("GET", path, f"stats {cid[:12]}") or {}
        return parse_stats(data, time.monotonic())

    def live_stats(self, cid: str) -> LiveStats:
        """``docker stats`` figures (two engine samples, ~1-2 s): for ``flowcon status``."""
        data = self._request("GET", f"/containers/{cid}/stats?stream=false", f"stats {cid[:12]}")
        return docker_stats_figures(data or {})

    def cgroup_usage(self, cid: str, cgroup_parent: str = "", pid: int = 0) -> CgroupSample | None:
        """CPU time and memory from the cgroup files; None when they are not reachable
        (the caller then asks the engine). Where the files are is found once."""
        found = self._cgroup_files(cid, cgroup_parent, pid)
        if found is None:
            return None
        cgroups, files = found
        try:
            cpu, mem = cgroups.read(files)
        except (OSError, CgroupFormatError) as exc:
            # Stopped or restarted (a new cgroup): look again next time.
            log.debug("cgroup of %s unreadable: %s", cid[:12], exc)
            self.forget(cid)
            return None
        return CgroupSample(time.monotonic(), cpu, mem)

    def cgroup_pids(self, cid: str, cgroup_parent: str = "", pid: int = 0) -> set[int] | None:
        """The PIDs in the container's cgroup (to match NVML's processes); None when its
        cgroup files are not reachable from here."""
        found = self._cgroup_files(cid, cgroup_parent, pid)
        if found is None:
            return None
        cgroups, files = found
        try:
            return cgroups.pids(files)
        except OSError as exc:
            log.debug("cgroup.procs of %s unreadable: %s", cid[:12], exc)
            return None

    def _cgroup_files(
        self, cid: str, cgroup_parent: str, pid: int
    ) -> tuple[CgroupReader, CgroupFiles] | None:
        """Where the container's cgroup files are (looked for once, then remembered);
        None when they are not reachable (or cgroups are off)."""
        cgroups = self.cgroups
        if cgroups is None:
            return None
        with self._cg_lock:
            known = cid in self._cg_files
            files = self._cg_files.get(cid)
        if not known:
            files = cgroups.locate(cid, cgroup_parent, pid)
            with self._cg_lock:
                self._cg_files[cid] = files
            if files is None:
                log.info("no cgroup files for %s: CPU from the engine's stats", cid[:12])
        return None if files is None else (cgroups, files)

    def forget(self, cid: str) -> None:
        """Drop what we know of a container that left."""
        with self._cg_lock:
            self._cg_files.pop(cid, None)

    def log_frames(self, cid: str, since_ns: int | None, tail: int | None) -> Iterator[bytes]:
        """New output frames (stdout and stderr), each prefixed with its RFC 3339 timestamp.

        ``since_ns``: only lines from that time on, inclusive (callers drop lines at or
        before their last timestamp themselves). Otherwise the last ``tail`` lines.
        """
        what = f"logs {cid[:12]}"
        query = "stdout=1&stderr=1&timestamps=1"
        if since_ns:
            query += f"&since={_since_param(since_ns)}"
        elif tail is not None:
            query += f"&tail={int(tail)}"
        try:
            path = self._path(f"/containers/{cid}/logs?{query}")
            with self.http.open("GET", path) as resp:
                if resp.status >= 400:
                    raise self._error(resp.status, resp.read(65536), what, f"/containers/{cid}")
                yield from demux_frames(resp.read)
        except Unreachable as exc:
            raise self._unavailable(what, exc) from exc

    def log_lines(
        self, cid: str, since_ns: int | None, tail: int | None, max_bytes: int
    ) -> Iterator[Line]:
        """New complete output lines (``flowcon.engine.logs.read_lines`` on ``log_frames``):
        after ``since_ns`` exclusive, else the last ``tail``; lines over ``max_bytes``
        come with text None."""
        return read_lines(self.log_frames(cid, since_ns, tail), max_bytes, since_ns or 0)

    def events(self) -> Any:
        """A closable stream of decoded container events (a fresh connection each time)."""
        if self._events_client is not None:
            self._events_client.close()  # the previous, broken connection
        try:
            version = self.version().api
            client = docker.APIClient(**{**self._kwargs, "version": version, "timeout": None})
            client.trust_env = False
            self._events_client = client
            return client.events(decode=True, filters={"type": "container"})
        except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
            raise self._unavailable("events", exc) from exc

    def close(self) -> None:
        self.http.close()
        if self._events_client is not None:
            self._events_client.close()
