"""The allocator's configuration file, shared by the daemon and the CLI clients.

One YAML file answers both "where do I listen / keep state" (daemon) and "where is the
daemon and what is its token" (``flowcon submit``/``jobs``/``cancel``), so a user points
both at the same file. Sections other than ``allocator`` (``gpus``, ``executor``) are kept
raw and handed to the modules that own their format.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flowcon.alloc.policy import POLICIES

DEFAULT_PORT = 8470
DEFAULT_LISTEN = f"127.0.0.1:{DEFAULT_PORT}"
DEFAULT_STATE_DIR = "~/.local/state/flowcon/allocator"
TOKEN_FILE = "token"
DB_FILE = "allocator.db"
ENV_URL = "FLOWCON_ALLOCATOR_URL"
ENV_TOKEN = "FLOWCON_ALLOCATOR_TOKEN"
ENV_CONFIG = "FLOWCON_ALLOCATOR_CONFIG"


class ConfigError(ValueError):
    pass


@dataclass
class AllocatorConfig:
    listen: str = DEFAULT_LISTEN
    url: str | None = None
    state_dir: Path = field(default_factory=lambda: Path(DEFAULT_STATE_DIR).expanduser())
    token: str | None = None
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
    # the scheduling policy, any of ``flowcon simulate --policy`` (flowcon.alloc.policy)
    policy: str = "elasticflow"
    raw: dict[str, Any] = field(default_factory=dict)
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
        return f"http://{host}:{self.port}"

    def section(self, name: str) -> dict[str, Any]:
        value = self.raw.get(name) or {}
        if not isinstance(value, dict):
            raise ConfigError(f"{self.source or 'config'}: '{name}' must be a mapping")
        return value


def _positive(value: Any, name: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ConfigError(f"allocator.{name} must be a number, got {value!r}") from None
    if not out > 0:
        raise ConfigError(f"allocator.{name} must be > 0, got {value!r}")
    return out


def _read_mapping(p: Path) -> dict[str, Any]:
    """The YAML file's top-level mapping."""
    try:
        raw = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise ConfigError(f"cannot read {p}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: invalid YAML: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"{p}: top level must be a mapping")
    return raw


def load_config(path: str | Path | None) -> AllocatorConfig:
    """Read ``path`` (or return defaults when None); relative state_dir is resolved
    against the config file's folder so a scenario folder is self-contained."""
    if path is None:
        return AllocatorConfig()
    p = Path(path)
    raw = _read_mapping(p)
    sec = raw.get("allocator") or {}
    if not isinstance(sec, dict):
        raise ConfigError(f"{p}: 'allocator' must be a mapping")
    known = {
        "listen",
        "url",
        "state_dir",
        "token",
        "slot_seconds",
        "ewma_alpha",
        "min_measurements",
        "profile_seconds",
        "profile_min_lines",
        "executor",
        "policy",
    }
    unknown = sorted(set(sec) - known)
    if unknown:
        raise ConfigError(f"{p}: unknown allocator keys: {', '.join(unknown)}")
    cfg = AllocatorConfig(raw=raw, source=p)
    if "listen" in sec:
        listen = str(sec["listen"])
        if ":" not in listen or not listen.rsplit(":", 1)[1].isdigit():
            raise ConfigError(f"{p}: allocator.listen must be HOST:PORT, got {listen!r}")
        cfg.listen = listen
    if sec.get("url"):
        cfg.url = str(sec["url"])
    if sec.get("state_dir"):
        sd = Path(str(sec["state_dir"])).expanduser()
        cfg.state_dir = sd if sd.is_absolute() else (p.parent / sd).resolve()
    if sec.get("token"):
        cfg.token = str(sec["token"])
    _numbers(cfg, sec, p)
    if sec.get("executor"):
        cfg.executor = str(sec["executor"])
    if "policy" in sec:
        cfg.policy = _policy(sec["policy"], p)
    return cfg


def _numbers(cfg: AllocatorConfig, sec: dict[str, Any], path: Path) -> None:
    """The numeric allocator settings."""
    if "slot_seconds" in sec:
        cfg.slot_seconds = _positive(sec["slot_seconds"], "slot_seconds")
    if "ewma_alpha" in sec:
        cfg.ewma_alpha = _positive(sec["ewma_alpha"], "ewma_alpha")
        if cfg.ewma_alpha > 1:
            raise ConfigError(f"{path}: allocator.ewma_alpha must be in (0, 1]")
    if "min_measurements" in sec:
        cfg.min_measurements = int(_positive(sec["min_measurements"], "min_measurements"))
    if "profile_seconds" in sec:
        cfg.profile_seconds = _positive(sec["profile_seconds"], "profile_seconds")
    if "profile_min_lines" in sec:
        lines = int(_positive(sec["profile_min_lines"], "profile_min_lines"))
        cfg.profile_min_lines = max(2, lines)


def _policy(value: Any, path: Path) -> str:
    """``allocator.policy``: one of the simulator's policies."""
    name = str(value)
    if name not in POLICIES:
        raise ConfigError(
            f"{path}: allocator.policy must be one of {', '.join(POLICIES)}, got {value!r}"
        )
    return name


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


def client_settings(
    config: str | Path | None, url: str | None, token: str | None
) -> tuple[str, str | None]:
    """URL and token for a CLI client: flags, then environment, then the config file
    (its token or the daemon's token file)."""
    url = url or os.environ.get(ENV_URL)
    token = token or os.environ.get(ENV_TOKEN)
    config = config or os.environ.get(ENV_CONFIG)
    if url and token:
        return url.rstrip("/"), token
    cfg = load_config(config) if config else AllocatorConfig()
    if not url:
        url = cfg.client_url
    if not token:
        if cfg.token:
            token = cfg.token
        elif cfg.token_path.exists():
            try:
                token = cfg.token_path.read_text().strip() or None
            except OSError:
                token = None
    return url.rstrip("/"), token
