"""The agent's YAML configuration, with the paper's defaults.

alpha 5% and itval 20 s are the settings the paper evaluates most (section 5.3);
beta = 2 is what its section 5.3 example implies: with two containers the slow one
in CL gets 1/(beta * 2) = 0.25 of the host.

The schema is a strict pydantic model (flowcon.schema): unknown keys and wrong types are
refused with a message naming the field, the value and what is allowed. Each key can be
set from the environment (``FLOWCON_<KEY>``, ``FLOWCON_ALLOCATOR_<KEY>``, ``*_FILE``
variants); ``FLOWCON_CONFIG`` names the file. See docs/agent.md.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, ValidationInfo, field_validator

from flowcon.core.control import DEFAULT_CONTROL, ControlMode
from flowcon.core.list_limits import AllClRule
from flowcon.schema import SchemaError, Strict, env_overrides, label_problem, merge, path_problem
from flowcon.schema import validate as schema_validate
from flowcon.textfile import NotText, SecretError, read_secret, read_text, safe_load_yaml

ENV_CONFIG = "FLOWCON_CONFIG"
# Swarm secret read for allocator.token when neither token nor token_file is set
AGENT_SECRET = "/run/secrets/flowcon_agent_token"

_HOST_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,251}[A-Za-z0-9])?$")
_DOCKER_HOST_RE = re.compile(r"^(unix|tcp|ssh|npipe|http|https)://\S+$")


class ConfigError(ValueError):
    """The configuration file cannot be used; the message says which key and why."""


def _finite(ge: float | None = None, gt: float | None = None, **kw: Any) -> Any:
    return Field(ge=ge, gt=gt, allow_inf_nan=False, **kw)


class AllocatorConfig(Strict):
    url: str | None = Field(
        None, description="http(s)://HOST:PORT of the allocator, or null (do not report)"
    )
    token: str | None = Field(None, description="the allocator's agent (or operator) token")
    token_file: str | None = Field(
        None, description="a file holding the token (e.g. /run/secrets/flowcon_agent_token)"
    )
    timeout: float = _finite(gt=0, default=5.0, description="seconds > 0")
    cacert: str | None = Field(
        None,
        description="a PEM file: the CA of an https allocator's certificate (default: "
        "FLOWCON_CACERT, else the system's CAs)",
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("http(s)://HOST:PORT of the allocator, or null")
        return value

    @field_validator("token_file", "cacert")
    @classmethod
    def _token_file(cls, value: str | None) -> str | None:
        why = path_problem(value) if value is not None else None
        if why:
            raise ValueError(why)
        return value


class Config(Strict):
    alpha: float = Field(0.05, gt=0, lt=1, description="a fraction in (0, 1)")
    itval: float = _finite(gt=0, default=20.0, description="seconds > 0")
    itval_max: float = _finite(  # cap of the exponential back-off
        gt=0, default=320.0, description="seconds > 0, at least itval"
    )
    beta: float = _finite(gt=0, default=2.0, description="a number > 0")
    reference_intervals: int = Field(  # intervals that set a job's reference G
        3, ge=1, description="an integer >= 1"
    )
    min_cpu_share: float = Field(  # floor of R in G = P / R
        0.01, gt=0, le=1, description="a share of the host in (0, 1]"
    )
    min_update_cpus: float = Field(  # limit changes smaller than this are not sent
        0.02, ge=0, lt=1, description="CPUs in [0, 1)"
    )
    state_file: str = Field(
        "/var/lib/flowcon/agent-state.json", description="a file path without '..'"
    )
    docker_host: str | None = Field(  # None: DOCKER_HOST or the default socket
        None, description="an engine URL such as unix:///var/run/docker.sock or tcp://h:2375"
    )
    # Prometheus /metrics, /healthz and the live view /ui; None: off. 9464 is the port
    # OpenTelemetry's Prometheus exporter uses by default (docs/deploy-agent.md).
    metrics_port: int | None = Field(
        9464, ge=1, le=65535, description="a TCP port 1..65535, or null (off)"
    )
    metrics_addr: str = Field("0.0.0.0", description="an IP address or host name to listen on")
    log_tail: int = Field(  # lines read from a container's existing log when first seen
        200, ge=0, description="an integer >= 0"
    )
    max_line_bytes: int = Field(64 * 1024, ge=1, description="an integer >= 1")
    history: int = Field(120, ge=1, description="an integer >= 1")  # measurements kept
    reconnect_max: float = _finite(  # cap of the event-stream reconnect back-off, s
        gt=0, default=10.0, description="seconds > 0"
    )
    # CPU time: "auto" reads the containers' cgroup files under cgroup_root when they are
    # reachable (no engine call), else the engine's stats; "engine" always asks the engine.
    cpu_source: Literal["auto", "engine"] = Field("auto", description="auto or engine")
    cgroup_root: str = Field("/sys/fs/cgroup", description="an absolute directory path")
    # With CPU from cgroups, block/network I/O (shown by `flowcon status`) come from the
    # engine's stats at most this often, in seconds (0: every round).
    io_stats_interval: float = _finite(ge=0, default=60.0, description="seconds >= 0")
    # GPUs (docs/agent.md, "GPUs"): "auto" samples NVML each round when it is present (per
    # container utilisation, memory, processes; one warning and CPU only where it is not);
    # "off" never loads NVML. gpu_weight: the GPU share's weight in a GPU job's R (CPU: 1).
    gpu_source: Literal["auto", "off"] = Field("auto", description="auto or off")
    gpu_weight: float = _finite(ge=0, default=1.0, description="a number >= 0")
    # GPU shares under CUDA MPS (flowcon.gpu.share=true containers that share a GPU): the
    # host folder the agent writes each container's share to (mounted read-only in the
    # container at /flowcon/gpu-share), and the restart cost assumed until one is measured.
    gpu_share_dir: str = Field(
        "/var/lib/flowcon/gpu-shares", description="an absolute directory path"
    )
    gpu_restart_cost: float = _finite(gt=0, default=60.0, description="seconds > 0")
    dry_run: bool = Field(False, description="true or false")
    # How Algorithm 1's shares are applied (flowcon/core/control.py, docs/agent.md).
    control: ControlMode = Field(DEFAULT_CONTROL, description="quota, weights, cpuset or hybrid")
    # The limits when every container is in CL (flowcon/core/list_limits.py). "equal" by
    # measurement (docs/agent.md, "When every container is in CL"); "free" is the paper's.
    all_cl: AllClRule = Field("equal", description="free or equal")
    # Only containers carrying all these labels (with these values) are considered: lets
    # several agents (tests, replays) share one engine without touching each other's jobs.
    match_labels: dict[str, str] = Field(
        default_factory=dict, description="a mapping of label names to string values"
    )
    # Containers the allocator's executor runs (flowcon.managed-by=flowcon-allocator) are
    # measured and reported for their job; their CPU limits are the allocator's unless true.
    manage_allocator_jobs: bool = Field(False, description="true or false")
    # The NVIDIA container toolkit's config on this node (flowcon/agent/toolkit.py): what it
    # says of NVIDIA_VISIBLE_DEVICES goes with each report (`flowcon nodes`, TOOLKIT)
    toolkit_config: str = Field(
        "/etc/nvidia-container-runtime/config.toml", description="an absolute file path"
    )
    allocator: AllocatorConfig = Field(
        default_factory=AllocatorConfig, description="a mapping (url, token, token_file, timeout)"
    )

    @field_validator("itval_max")
    @classmethod
    def _itval_max(cls, value: float, info: ValidationInfo) -> float:
        itval = info.data.get("itval")
        if isinstance(itval, float | int) and value < itval:
            raise ValueError(f"seconds, at least itval ({itval})")
        return value

    @field_validator("docker_host")
    @classmethod
    def _docker_host(cls, value: str | None) -> str | None:
        if value is not None and not _DOCKER_HOST_RE.match(value):
            raise ValueError("an engine URL such as unix:///var/run/docker.sock or tcp://h:2375")
        return value

    @field_validator("metrics_addr")
    @classmethod
    def _metrics_addr(cls, value: str) -> str:
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOST_RE.match(value):
                raise ValueError("an IP address or host name to listen on") from None
        return value

    @field_validator("state_file", "cgroup_root", "gpu_share_dir", "toolkit_config")
    @classmethod
    def _paths(cls, value: str, info: ValidationInfo) -> str:
        absolute = info.field_name in ("cgroup_root", "gpu_share_dir", "toolkit_config")
        why = path_problem(value, absolute=absolute)
        if why:
            raise ValueError(why)
        return value

    @field_validator("match_labels", mode="before")
    @classmethod
    def _labels(cls, value: Any) -> Any:
        """Numbers as label values are written as strings (``flowcon.test: 1``)."""
        if not isinstance(value, Mapping):
            return value
        out: dict[Any, Any] = {}
        for k, v in value.items():
            if isinstance(v, int | float) and not isinstance(v, bool):
                v = str(v)
            if isinstance(k, str) and isinstance(v, str):
                why = label_problem(k, v)
                if why:
                    raise ValueError(f"{why}: {k!r}")
            out[k] = v
        return out


def _error(exc: SchemaError) -> ConfigError:
    return ConfigError(str(exc))


def _resolve_token(cfg: Config, source: str) -> Config:
    """allocator.token from token_file, else the Swarm secret, when not given."""
    alloc = cfg.allocator
    if alloc.token:
        return cfg
    path = alloc.token_file or (AGENT_SECRET if Path(AGENT_SECRET).is_file() else None)
    if path is None:
        return cfg
    try:
        alloc.token = read_secret(path)
    except SecretError as exc:
        raise ConfigError(f"{source}allocator.token_file: {exc}") from None
    return cfg


def from_mapping(
    data: Mapping[str, Any], source: str = "", sources: Mapping[str, str] | None = None
) -> Config:
    """A Config from a mapping (a YAML document); ConfigError names each bad key."""
    if "allocator" in data and data["allocator"] is None:
        data = {**data, "allocator": {}}  # an empty section, as before
    try:
        return schema_validate(Config, data, source, sources)
    except SchemaError as exc:
        raise _error(exc) from None


def _read(path: str | Path) -> dict[str, Any]:
    try:
        text = read_text(path)
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    except NotText as exc:
        raise ConfigError(f"{path}, {exc}") from None
    try:
        data = safe_load_yaml(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a mapping of settings")
    return data


def load(path: str | Path | None, environ: Mapping[str, str] | None = None) -> Config:
    """Read a YAML file (None: ``FLOWCON_CONFIG``, else the defaults), then the
    ``FLOWCON_*`` overrides. Raises ConfigError naming the key (or variable) and why."""
    env = os.environ if environ is None else environ
    if path is None and env.get(ENV_CONFIG):
        path = env[ENV_CONFIG]
    data = _read(path) if path is not None else {}
    try:
        over, sources = env_overrides(Config, env)
    except SchemaError as exc:
        raise _error(exc) from None
    source = str(path) if path is not None else ""
    cfg = from_mapping(merge(data, over), source, sources)
    return _resolve_token(cfg, f"{source}: " if source else "")
