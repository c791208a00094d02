"""The allocator's configuration file, shared by the daemon and the CLI clients.

One YAML file answers both "where do I listen / keep state" (daemon) and "where is the
daemon and what is its token" (``flowcon submit``/``jobs``/``cancel``), so a user points
both at the same file. Every section (``allocator``, ``gpus``, ``executor``) is checked by
a strict schema (flowcon.schema): a typo or a bad value is refused with a message naming
the key; ``gpus.declared`` is checked in detail by flowcon.engine.gpus. Each key can be
overridden from the environment as ``FLOWCON_<SECTION>_<KEY>`` (``*_FILE`` for secrets).

The API's credentials are per role (flowcon.allocator.auth): ``agent_token``,
``user_token``, ``read_token``, each also as ``<name>_file`` or the Swarm secret
``/run/secrets/flowcon_<role>_token``; the legacy ``token`` is the operator's, valid for
every role, and generated into the state folder when none is given.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field, field_validator

from flowcon.allocator.auth import RESERVED_NAMES
from flowcon.allocator.quota import Quota
from flowcon.contract import EXECUTOR_LABELS
from flowcon.executor.node_hosts import parse_node_hosts
from flowcon.executor.reach import (
    DEFAULT_PIDS_LIMIT,
    DEFAULT_PROBE_IMAGE,
    DEFAULT_USER,
    USER_IDS_KEY,
    capability_problem,
    is_root,
)
from flowcon.jobspec.keys import SpecKeyError, parse_id_ranges, parse_size, parse_user
from flowcon.policy_registry import POLICIES
from flowcon.schema import SchemaError, Strict, env_overrides, merge, path_problem
from flowcon.schema import validate as schema_validate
from flowcon.textfile import NotText, SecretError, read_secret, read_text, safe_load_yaml
from flowcon.tls import ENV_CACERT

DEFAULT_PORT = 8470
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_STATE_DIR = "~/.local/state/flowcon/allocator"
TOKEN_FILE = "token"
DB_FILE = "allocator.db"
# the config file (or one of its sections) as parsed YAML: each section is checked by its
# schema below, the executor and GPU sections again by the modules that read them
RawYaml = dict[str, Any]
ENV_URL = "FLOWCON_ALLOCATOR_URL"
ENV_TOKEN = "FLOWCON_ALLOCATOR_TOKEN"
ENV_TOKEN_SHORT = "FLOWCON_TOKEN"  # accepted by the clients too
ENV_CONFIG = "FLOWCON_ALLOCATOR_CONFIG"


class ConfigError(ValueError):
    pass


# The API's roles (flowcon.allocator.auth): each token may be given inline, as a file, or
# (when neither) as the Swarm secret /run/secrets/flowcon_<role>_token. ``token`` is the
# legacy single token, now the operator's: valid for every role.
ROLES = ("agent", "user", "read")
SECRETS_DIR = Path("/run/secrets")
_HOSTPORT_RE = re.compile(r"^(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]*):(\d{1,5})\Z")
_NETWORK_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_USER_NAME_RE = re.compile(r"^[a-z][a-z0-9-]{0,31}\Z")


@dataclass
class AllocatorConfig:
    listen: str = DEFAULT_LISTEN
    url: str | None = None
    state_dir: Path = field(default_factory=lambda: Path(DEFAULT_STATE_DIR).expanduser())
    token: str | None = None  # operator (legacy single token): every role
    agent_token: str | None = None  # POST measurements
    user_token: str | None = None  # submit, cancel (and read)
    read_token: str | None = None  # GET only
    # named users, (name, token) each: a user role of their own, owning their jobs
    users: tuple[tuple[str, str], ...] = ()
    quotas: dict[str, Quota] = field(default_factory=dict)  # a named user's limits
    # TLS on the API (both or neither): the server's certificate (PEM, its chain) and key
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # listen on a non-loopback address without TLS (a trusted network's choice)
    insecure_listen: bool = False
    slot_seconds: float = 60.0
    # weight of a new measurement in the EWMA of a job's speed at its current GPU count
    ewma_alpha: float = 0.3
    # measurements are trusted only after this many samples at one GPU count
    min_measurements: int = 2
    # pre-run of a ``profile: auto`` job: at most this long per GPU count, done once the
    # job printed this many metric lines after its first (start-up) one
    profile_seconds: float = 60.0
    profile_min_lines: int = 6
    executor: str = "engine"
    # the scheduling policy, any of ``flowcon simulate --policy`` (flowcon/policy_registry.py)
    policy: str = "elasticflow"
    # ``flowcon scale`` by a job's owner (named users) within its bounds; else operator only
    owners_may_scale: bool = False
    # seconds placement keeps off a GPU a straggler was removed from (0: not at all)
    straggler_avoid_seconds: float = 600.0
    # ``profile: auto`` of a stop-free job: by scaling the running job (false: pre-run)
    profile_by_scaling: bool = True
    raw: RawYaml = field(default_factory=dict)
    source: Path | None = None

    @property
    def host(self) -> str:
        return self.listen.rsplit(":", 1)[0] or "127.0.0.1"

    @property
    def port(self) -> int:
        return int(self.listen.rsplit(":", 1)[1])

    @property
    def db_path(self) -> Path:
        return self.state_dir / DB_FILE

    @property
    def token_path(self) -> Path:
        return self.state_dir / TOKEN_FILE

    @property
    def client_url(self) -> str:
        if self.url:
            return self.url.rstrip("/")
        host = self.host
        if host in ("0.0.0.0", "::", ""):
            host = "127.0.0.1"
        scheme = "https" if self.tls_cert_file else "http"
        return f"{scheme}://{host}:{self.port}"

    def listen_problem(self) -> str | None:
        """Why the API may not listen where ``listen`` says (None: it may): a non-loopback
        address without TLS sends every token in clear, unless the operator says so."""
        host = self.host.strip("[]")
        loopback = host in ("localhost", "::1") or host.startswith("127.")
        if loopback or self.tls_cert_file or self.insecure_listen:
            return None
        return (
            f"allocator.listen {self.listen} is not a loopback address and the API has no TLS:"
            " every token would cross the network in clear; set allocator.tls_cert_file and"
            " tls_key_file, or allocator.insecure_listen: true on a trusted network"
        )

    def section(self, name: str) -> RawYaml:
        value = self.raw.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{self.source or 'config'}: '{name}' must be a mapping")
        return value


# ---------------------------------------------------------------- schema


# returns pydantic's Field(), which the type checker takes as the field's default
def _secret_field(role: str) -> Any:
    return Field(None, description=f"the {role} token (a string)")


def _file_field(role: str) -> Any:
    return Field(None, description=f"a file holding the {role} token (e.g. a Swarm secret)")


IdRangesField = str | int | list[str | int] | None
_RANGES_HELP = "a range like 1000-1999, a number, or a list of them, or null (any but 0)"


def _id_ranges(value: IdRangesField) -> IdRangesField:
    if value is not None:
        try:
            parse_id_ranges(value, "ids")
        except SpecKeyError as exc:
            raise ValueError(exc.message) from None
    return value


class BindRoot(Strict):
    """An ``executor.bind_roots`` entry written as a mapping."""

    path: str = Field(description="an absolute host directory")
    read_only: bool = Field(False, description="true: every mount under it is read-only")


class UserEntry(Strict):
    """One named user: their token (inline, or a file such as a Swarm secret)."""

    name: str = Field(description="a user name: a-z, 0-9 and '-', starting with a letter")
    token: str | None = Field(None, description="the user's token (a string)")
    token_file: str | None = Field(None, description="a file holding the user's token")
    max_gpus: int | None = Field(
        None, ge=1, description="an integer >= 1: GPUs the user's deadline jobs may hold"
    )
    max_jobs: int | None = Field(
        None, ge=1, description="an integer >= 1: the user's active jobs at a time"
    )
    # the uids / gids this user's jobs may run as (docs/security.md, "user")
    uids: IdRangesField = Field(None, description=_RANGES_HELP)
    gids: IdRangesField = Field(None, description=_RANGES_HELP)

    @field_validator("uids", "gids")
    @classmethod
    def _ids(cls, value: IdRangesField) -> IdRangesField:
        return _id_ranges(value)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _USER_NAME_RE.match(value):
            raise ValueError("a-z, 0-9 and '-', starting with a letter, at most 32")
        if value in RESERVED_NAMES:
            raise ValueError(f"a name other than {', '.join(sorted(RESERVED_NAMES))}")
        return value

    @field_validator("token_file")
    @classmethod
    def _file(cls, value: str | None) -> str | None:
        why = path_problem(value) if value is not None else None
        if why:
            raise ValueError(why)
        return value


class AllocatorSection(Strict):
    listen: str = Field(DEFAULT_LISTEN, description="HOST:PORT with a port in 0..65535")
    url: str | None = Field(None, description="http(s)://HOST:PORT the clients use, or null")
    state_dir: str | None = Field(None, description="a directory path without '..'")
    token: str | None = _secret_field("operator (legacy, every role)")
    token_file: str | None = _file_field("operator")
    agent_token: str | None = _secret_field("agent")
    agent_token_file: str | None = _file_field("agent")
    user_token: str | None = _secret_field("user")
    user_token_file: str | None = _file_field("user")
    read_token: str | None = _secret_field("read-only")
    read_token_file: str | None = _file_field("read-only")
    slot_seconds: float = Field(60.0, gt=0, allow_inf_nan=False, description="seconds > 0")
    ewma_alpha: float = Field(0.3, gt=0, le=1, description="a fraction in (0, 1]")
    min_measurements: int = Field(2, ge=1, description="an integer >= 1")
    profile_seconds: float = Field(60.0, gt=0, allow_inf_nan=False, description="seconds > 0")
    profile_min_lines: int = Field(6, ge=2, description="an integer >= 2")
    executor: Literal["engine", "swarm"] = Field(
        "engine", description="engine or swarm (legacy: use executor.backend)"
    )
    users: list[UserEntry] = Field(
        default_factory=list, description="a list of {name, token or token_file}"
    )
    tls_cert_file: str | None = Field(
        None, description="a PEM file: the API's TLS certificate (and its chain), or null"
    )
    tls_key_file: str | None = Field(None, description="a PEM file: its private key, or null")
    insecure_listen: bool = Field(
        False, description="true: listen on a non-loopback address without TLS"
    )
    policy: str = Field("elasticflow", description=f"one of {', '.join(POLICIES)}")
    owners_may_scale: bool = Field(
        False, description="true: a job's owner may scale it within its bounds"
    )
    straggler_avoid_seconds: float = Field(
        600.0, ge=0, allow_inf_nan=False, description="seconds >= 0 (0: no avoidance)"
    )
    profile_by_scaling: bool = Field(
        True, description="true: stop-free jobs are profiled by scaling them while they run"
    )

    @field_validator("listen")
    @classmethod
    def _listen(cls, value: str) -> str:
        m = _HOSTPORT_RE.match(value)
        if m is None or int(m.group(2)) > 65535:
            raise ValueError("HOST:PORT with a port in 0..65535")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^https?://[^\s/]+", value):
            raise ValueError("http(s)://HOST:PORT the clients use, or null")
        return value

    @field_validator(
        "state_dir",
        "token_file",
        "agent_token_file",
        "user_token_file",
        "read_token_file",
        "tls_cert_file",
        "tls_key_file",
    )
    @classmethod
    def _path(cls, value: str | None) -> str | None:
        why = path_problem(value) if value is not None else None
        if why:
            raise ValueError(why)
        return value

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: str) -> str:
        if value not in POLICIES:
            raise ValueError(f"one of {', '.join(POLICIES)}")
        return value


class ExecutorSection(Strict):
    backend: Literal["engine", "swarm"] = Field("engine", description="engine or swarm")
    grace_s: float = Field(30.0, ge=0, allow_inf_nan=False, description="seconds >= 0")
    max_restarts: int = Field(3, ge=0, description="an integer >= 0")
    checkpoint_every: int | None = Field(
        None, ge=1, description="an integer >= 1 (steps), or null (the job's own)"
    )
    checkpoint_host_dir: str | None = Field(
        None, description="an absolute directory path without '..', or null"
    )
    network: str = Field("auto", description="auto, host or a Docker network name")
    # stop-free scale-in: how long a leaving container has to exit before the job is
    # checkpoint-restarted instead (docs/elastic.md, "Executor: stop-free rescale")
    leave_timeout_s: float = Field(60.0, gt=0, allow_inf_nan=False, description="seconds > 0")
    # Extra labels on every container the executor creates; it also only sees containers
    # that carry them, so two allocators on one engine (or a test) stay apart.
    labels: dict[str, str] = Field(
        default_factory=dict, description="a mapping of label: value (strings)"
    )
    # What a job's containers may reach (flowcon/executor/reach.py, docs/security.md).
    bind_roots: list[str | BindRoot] = Field(
        default_factory=list,
        description="a list of absolute host directories or {path, read_only} (default"
        " none: named volumes only)",
    )
    probe_image: str = Field(
        DEFAULT_PROBE_IMAGE,
        description="the image the executor's never-started probe containers are made of",
    )
    uid_range: IdRangesField = Field(None, description=_RANGES_HELP)
    gid_range: IdRangesField = Field(None, description=_RANGES_HELP)
    images: list[str] = Field(
        default_factory=lambda: ["*"],
        description="a list of image patterns such as registry.example.com/ml/* (default *)",
    )
    cap_add: list[str] = Field(
        default_factory=list, description="a list of Docker's default capabilities"
    )
    pids_limit: int = Field(
        DEFAULT_PIDS_LIMIT, ge=64, description="an integer >= 64 (processes and threads)"
    )
    shared_volumes: list[str] = Field(
        default_factory=list,
        description="a list of named volumes every user's jobs mount by their name",
    )
    default_user: str | None = Field(
        DEFAULT_USER,
        description="uid[:gid] a job runs as when its spec names none, or null (the image's)",
    )
    # Swarm: the engine of each node (flowcon.node label -> DOCKER_HOST-style address), where
    # host paths are resolved and fresh volumes handed to the job's user before it starts;
    # unix://, ssh:// or tcp:// with mutual TLS only (flowcon/executor/node_hosts.py)
    node_hosts: dict[str, str | dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "a mapping of swarm node name: engine address (unix:///..., ssh://user@host,"
            " or tcp://host:2376 with TLS) or {host, tls: {ca_cert, client_cert, client_key}}"
        ),
    )
    node_tls: dict[str, str] | None = Field(
        None,
        description="{ca_cert, client_cert, client_key}: mutual TLS for every tcp:// node host",
    )
    # Swarm: place jobs on a node whose engine cannot apply every hardening (no
    # no-new-privileges before Engine API 1.46, no user namespaces); reported either way
    allow_weak_hardening: bool = Field(
        False, description="true: jobs may run on nodes that lack no-new-privileges"
    )
    allow_root: bool = Field(False, description="true: a spec (or default_user) may name uid 0")
    default_cpus_per_gpu: float | None = Field(
        None, ge=0.01, allow_inf_nan=False, description="CPUs >= 0.01, or null (no limit)"
    )
    default_memory_per_gpu: str | int | None = Field(
        None, description="a size like 8g or a number of bytes, or null (no limit)"
    )

    @field_validator("default_user")
    @classmethod
    def _default_user(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                parse_user(value)
            except ValueError:
                raise ValueError("uid[:gid] (e.g. 1000:1000) or a user name[:group]") from None
        return value

    @field_validator("uid_range", "gid_range")
    @classmethod
    def _ranges(cls, value: IdRangesField) -> IdRangesField:
        return _id_ranges(value)

    @field_validator("probe_image")
    @classmethod
    def _probe_image(cls, value: str) -> str:
        if not value or any(c.isspace() for c in value):
            raise ValueError("an image name without spaces")
        return value

    @field_validator("default_memory_per_gpu")
    @classmethod
    def _default_memory(cls, value: str | int | None) -> str | int | None:
        if value is not None:
            try:
                parse_size(value, "default_memory_per_gpu")
            except ValueError:
                raise ValueError("a size like 8g, 512m or a number of bytes") from None
        return value

    @field_validator("bind_roots")
    @classmethod
    def _bind_roots(cls, value: list[str | BindRoot]) -> list[str | BindRoot]:
        for entry in value:
            root = entry.path if isinstance(entry, BindRoot) else entry
            why = path_problem(root, absolute=True)
            if why:
                raise ValueError(f"{root!r}: {why}")
            if root.strip("/") == "":
                raise ValueError("'/' (the whole host) is not a root")
        return value

    @field_validator("images")
    @classmethod
    def _images(cls, value: list[str]) -> list[str]:
        bad = [p for p in value if not p or any(c.isspace() for c in p)]
        if bad:
            raise ValueError(f"{bad[0]!r}: a pattern without spaces")
        return value

    @field_validator("cap_add")
    @classmethod
    def _cap_add(cls, value: list[str]) -> list[str]:
        for cap in value:
            why = capability_problem(cap)
            if why:
                raise ValueError(why)
        return value

    @field_validator("labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        taken = sorted(set(value) & set(EXECUTOR_LABELS))
        if taken:
            raise ValueError(f"{', '.join(taken)}: set by the executor itself")
        return value

    @field_validator("checkpoint_host_dir")
    @classmethod
    def _host_dir(cls, value: str | None) -> str | None:
        why = path_problem(value, absolute=True) if value is not None else None
        if why:
            raise ValueError(why)
        return value

    @field_validator("network")
    @classmethod
    def _network(cls, value: str) -> str:
        if not _NETWORK_RE.match(value):
            raise ValueError("auto, host or a Docker network name ([A-Za-z0-9_.-])")
        return value


class GpusSection(Strict):
    node_name: str | None = Field(None, description="this machine's node name, or null")
    # checked by flowcon.engine.gpus.declared_nodes, which names the entry at fault
    declared: RawYaml | None = Field(None, description="{nodes: [{name, gpus}, ...]}")


class AllocatorFile(Strict):
    allocator: AllocatorSection = Field(
        default_factory=AllocatorSection, description="a mapping of allocator settings"
    )
    gpus: GpusSection = Field(default_factory=GpusSection, description="a mapping")
    executor: ExecutorSection = Field(default_factory=ExecutorSection, description="a mapping")


SECTIONS = ("allocator", "gpus", "executor")


def check_listen(value: str) -> str:
    """``--listen`` as the config's ``allocator.listen`` is checked (ConfigError if bad)."""
    try:
        return schema_validate(AllocatorSection, {"listen": value}, "--listen").listen
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None


def _read_mapping(p: Path) -> RawYaml:
    """The YAML file's top-level mapping."""
    try:
        raw = safe_load_yaml(read_text(p)) or {}
    except NotText as exc:
        raise ConfigError(f"{p}, {exc}") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: top level must be a mapping")
    for name in SECTIONS:
        if raw.get(name) is None and name in raw:
            raw[name] = {}  # an empty section
    return raw


def _read_token(path: str | Path, where: str) -> str | None:
    try:
        return read_secret(path)
    except SecretError as exc:
        raise ConfigError(f"{where}: {exc}") from None


def _role_token(
    sec: AllocatorSection, key: str, secret: str, secrets_dir: Path, where: str
) -> str | None:
    """A role's token: inline, else its file, else the Swarm secret when present."""
    value: str | None = getattr(sec, key)
    if value:
        return value
    path: str | None = getattr(sec, f"{key}_file")
    if path:
        return _read_token(path, f"{where}allocator.{key}_file")
    default = secrets_dir / secret
    return _read_token(default, where + str(default)) if default.is_file() else None


def _users(sec: AllocatorSection, where: str) -> tuple[tuple[str, str], ...]:
    """The named users' (name, token) pairs: one token each, no name or token twice."""
    out: list[tuple[str, str]] = []
    for i, u in enumerate(sec.users):
        key = f"{where}allocator.users[{i}]"
        token = u.token or (
            _read_token(u.token_file, f"{key}.token_file") if u.token_file else None
        )
        if not token:
            raise ConfigError(f"{key}: {u.name}: a token or a token_file is needed")
        if any(name == u.name for name, _ in out):
            raise ConfigError(f"{key}.name: {u.name!r} is listed twice")
        taken = [name for name, t in out if t == token]
        role_tokens = (sec.token, sec.user_token, sec.read_token, sec.agent_token)
        if taken or token in role_tokens:
            raise ConfigError(f"{key}: {u.name}'s token is another user's or a role's token")
        out.append((u.name, token))
    return tuple(out)


def _user_ids(sec: AllocatorSection) -> dict[str, object]:
    """The named users' uid/gid ranges, handed to the executor's checks with its section
    (flowcon/executor/reach.py); nothing when no user has any."""
    ids = {
        u.name: {"uids": u.uids, "gids": u.gids}
        for u in sec.users
        if u.uids is not None or u.gids is not None
    }
    return {USER_IDS_KEY: ids} if ids else {}


def load_config(
    path: str | Path | None,
    environ: Mapping[str, str] | None = None,
    secrets_dir: Path | None = None,
) -> AllocatorConfig:
    """Read ``path`` (or the defaults when None), then the ``FLOWCON_<SECTION>_<KEY>``
    overrides; relative state_dir is resolved against the config file's folder so a
    scenario folder is self-contained. Raises ConfigError naming each bad key."""
    p = Path(path) if path is not None else None
    raw = _read_mapping(p) if p is not None else {}
    try:
        over, sources = env_overrides(AllocatorFile, environ, sections=SECTIONS)
        model = schema_validate(AllocatorFile, merge(raw, over), str(p or ""), sources)
    except SchemaError as exc:
        raise ConfigError(str(exc)) from None
    sec = model.allocator
    where = f"{p}: " if p is not None else ""
    ex = model.executor
    if ex.default_user is not None and is_root(ex.default_user) and not ex.allow_root:
        raise ConfigError(
            f"{where}executor.default_user: {ex.default_user!r} is uid 0 or gid 0: pick"
            " another uid:gid, or set executor.allow_root: true"
        )
    try:
        parse_node_hosts(ex.node_hosts, ex.node_tls)
    except ValueError as exc:
        raise ConfigError(f"{where}{exc}") from None
    secrets = SECRETS_DIR if secrets_dir is None else secrets_dir
    cfg = AllocatorConfig(
        listen=sec.listen,
        url=sec.url,
        token=_role_token(sec, "token", "flowcon_token", secrets, where),
        agent_token=_role_token(sec, "agent_token", "flowcon_agent_token", secrets, where),
        user_token=_role_token(sec, "user_token", "flowcon_user_token", secrets, where),
        read_token=_role_token(sec, "read_token", "flowcon_read_token", secrets, where),
        users=_users(sec, where),
        insecure_listen=sec.insecure_listen,
        quotas={u.name: Quota(u.max_gpus, u.max_jobs) for u in sec.users},
        slot_seconds=sec.slot_seconds,
        ewma_alpha=sec.ewma_alpha,
        min_measurements=sec.min_measurements,
        profile_seconds=sec.profile_seconds,
        profile_min_lines=sec.profile_min_lines,
        executor=sec.executor,
        policy=sec.policy,
        owners_may_scale=sec.owners_may_scale,
        straggler_avoid_seconds=sec.straggler_avoid_seconds,
        profile_by_scaling=sec.profile_by_scaling,
        raw={
            **raw,
            "gpus": model.gpus.model_dump(exclude_none=True),
            "executor": {**model.executor.model_dump(exclude_unset=True), **_user_ids(sec)},
        },
        source=p,
    )
    base = p.parent if p else Path.cwd()
    if sec.state_dir:
        sd = Path(sec.state_dir).expanduser()
        cfg.state_dir = sd if sd.is_absolute() else (base / sd).resolve()
    if bool(sec.tls_cert_file) != bool(sec.tls_key_file):
        raise ConfigError(f"{where}allocator.tls_cert_file and tls_key_file: both, or neither")
    if sec.tls_cert_file and sec.tls_key_file:
        cfg.tls_cert_file = (base / Path(sec.tls_cert_file).expanduser()).resolve()
        cfg.tls_key_file = (base / Path(sec.tls_key_file).expanduser()).resolve()
    return cfg


def ensure_token(cfg: AllocatorConfig) -> str:
    """The daemon's token: from the config, else the 0600 token file next to the DB
    (created with a fresh random token at first start)."""
    if cfg.token:
        return cfg.token
    path = cfg.token_path
    if path.exists():
        token = path.read_text().strip()
        if token:
            return token
    path.parent.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(str(path), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(token + "\n")
    os.chmod(path, 0o600)
    return token


def client_cacert(config: str | Path | None) -> str | None:
    """The CA a CLI client checks the API's certificate with: ``FLOWCON_CACERT``, else
    the config file's ``allocator.tls_cert_file`` (a self-signed certificate is its own
    CA); None: the system's CAs."""
    if os.environ.get(ENV_CACERT):
        return os.environ[ENV_CACERT]
    config = config or os.environ.get(ENV_CONFIG)
    if not config:
        return None
    try:
        cert = load_config(config).tls_cert_file
    except ConfigError:
        return None
    return str(cert) if cert else None


def client_settings(
    config: str | Path | None, url: str | None, token: str | None
) -> tuple[str, str | None]:
    """URL and token for a CLI client: flags, then environment (``FLOWCON_ALLOCATOR_URL``,
    ``FLOWCON_ALLOCATOR_TOKEN`` or ``FLOWCON_TOKEN``), then the config file (its user
    token, its operator token, or the daemon's token file)."""
    url = url or os.environ.get(ENV_URL)
    token = token or os.environ.get(ENV_TOKEN) or os.environ.get(ENV_TOKEN_SHORT)
    config = config or os.environ.get(ENV_CONFIG)
    if url and token:
        return url.rstrip("/"), token
    cfg = load_config(config)
    if not url:
        url = cfg.client_url
    if not token:
        token = cfg.user_token or cfg.token
    if not token and cfg.token_path.exists():
        try:
            token = cfg.token_path.read_text().strip() or None
        except OSError:
            token = None
    return url.rstrip("/"), token
