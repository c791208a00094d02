"""The container-facing keys of a job spec: volumes, shm_size, cpus/memory (per worker or
per GPU), workdir, user, labels, deadline_kind and metric.

Each ``parse_*`` takes the raw YAML value and returns the checked value or raises
``JobSpecError`` naming the field, the value and what is allowed. The rules (see
docs/jobs.md, "Job spec reference"):

* volumes: ``SOURCE:TARGET[:ro|rw]`` (Docker's short form) or a mapping ``{source, target,
  read_only}``. A SOURCE starting with ``/`` is a bind mount of that host path, anything
  else a named volume. Bind sources are absolute, without ``..`` or shell characters;
  ``/`` and the Docker socket are refused (a job that can reach the engine can start any
  container, so it owns the host), as are named volumes in the executor's ``flowcon-``
  namespace. Targets are absolute and may not cover ``/``, ``/dev/shm``, ``/proc``,
  ``/sys`` or the checkpoint mount, nor lie under ``GPU_RUNTIME_TARGETS``; no two volumes
  share a target.
* sizes (shm_size, memory, memory_per_gpu): bytes, or a number with k, m, g or t (binary
  units, as ``docker run --memory``; ``Ki``/``Mi``/``Gi``/``Ti`` and ``kb``... mean the
  same).
* cpus / cpus_per_gpu, memory / memory_per_gpu: per worker container, or per GPU of the
  container (Slurm's ``--cpus-per-gpu``/``--mem-per-gpu``); a pair may not both be given.
* labels: keys outside the ``flowcon.`` namespace the executor owns, values strings.
* user: ``uid[:gid]`` or a user name (as ``docker run --user``); numbers are decimal (no
  sign or space) up to ``MAX_ID`` and are kept in canonical form (``007`` is ``7``).
* env: no key that steers the GPU runtime or the loader (``runtime_env_problem``).
* metric: ``{name, regex, goal, steps_per_line, steps_per_epoch}``; the regex compiles
  with ``flowcon.core.labels.compile_metric_regex``, the same rule as the agent's
  ``flowcon.metric.regex`` label.
"""

from __future__ import annotations

import math
import posixpath
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from flowcon import contract
from flowcon.core.labels import LabelError, compile_metric_regex
from flowcon.core.metric_lines import MetricRegex
from flowcon.schema import label_problem, path_problem, show

GIB = 1 << 30
MIB = 1 << 20
DEFAULT_SHM = GIB  # PyTorch DataLoader workers need more than Docker's 64 MB /dev/shm
MIN_SHM = 1 << 20
MIN_MEMORY = 6 * MIB  # Docker refuses a memory limit below 6 MB
MIN_CPUS = 0.01  # Docker refuses --cpus below 0.01

_SIZE_RE = re.compile(r"^(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b?)\Z", re.IGNORECASE)
_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_LABEL_KEY_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/-]{0,254}")
VOLUME_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}\Z")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9._-]{0,31}\Z")  # POSIX portable user/group names
_ID_RE = re.compile(r"^[0-9]{1,10}\Z")  # ASCII digits only: no sign, space or other script
MAX_ID = 4294967294  # the largest uid/gid the kernel takes ((uid_t)-1 means "unchanged")
DOCKER_SOCKETS = frozenset({"/var/run/docker.sock", "/run/docker.sock"})
_FORBIDDEN_TARGETS = ("/proc", "/sys", "/dev/shm", contract.CHECKPOINT_MOUNT)
# The NVIDIA container toolkit reads a mount whose destination is under these folders as a
# request for the GPU devices named by the rest of the path: no spec may mount there.
GPU_RUNTIME_TARGETS = ("/var/run/nvidia-container-devices", "/run/nvidia-container-devices")
# Environment keys that steer the GPU runtime (which devices, which driver capabilities) or
# the dynamic loader of every process in the container (LD_PRELOAD, LD_LIBRARY_PATH, ...):
# the executor sets the first itself, and no spec may set either (docs/security.md).
RUNTIME_ENV_PREFIXES = ("NVIDIA_", "DOCKER_RESOURCE_", "LD_")
RUNTIME_ENV_KEYS = frozenset({"CUDA_VISIBLE_DEVICES"})
METRIC_GOALS = ("min", "max")


class SpecKeyError(ValueError):
    """A bad value of one key: ``field`` (dotted) and what is wrong (``message``)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


def _bad(field_name: str, value: object, allowed: str) -> SpecKeyError:
    return SpecKeyError(field_name, f"{show(value)} is not allowed: {allowed}")


# ---------------------------------------------------------------- values


@dataclass(frozen=True)
class VolumeSpec:
    """One mount of a job's containers: a bind mount (``kind="bind"``, absolute host path)
    or a named volume (``kind="volume"``)."""

    source: str
    target: str
    read_only: bool = False

    @property
    def kind(self) -> str:
        return "bind" if self.source.startswith("/") else "volume"

    def as_dict(self) -> dict[str, object]:
        return {"source": self.source, "target": self.target, "read_only": self.read_only}


@dataclass(frozen=True)
class MetricSpec:
    """How the allocator reads a job's own log lines (``flowcon.metric.*`` labels' meaning).

    The regex has a named group ``value`` (the metric, e.g. the loss) and may have ``step``
    (the global step counter) or ``epoch``. Steps come from, in this order: the ``step``
    group; the ``epoch`` group times ``steps_per_epoch``; or the number of matching lines
    times ``steps_per_line`` (default 1)."""

    name: str = "loss"
    regex: str | None = None
    goal: str = "min"
    steps_per_line: float | None = None
    steps_per_epoch: int | None = None

    def compiled(self) -> MetricRegex | None:
        return None if self.regex is None else compile_metric_regex(self.regex)

    def as_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "regex": self.regex,
            "goal": self.goal,
            "steps_per_line": self.steps_per_line,
            "steps_per_epoch": self.steps_per_epoch,
        }

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> MetricSpec:
        """Back from ``as_dict`` (a stored spec's JSON, checked when it was parsed)."""
        return MetricSpec(
            name=str(data.get("name") or "loss"),
            regex=data.get("regex"),
            goal=str(data.get("goal") or "min"),
            steps_per_line=data.get("steps_per_line"),
            steps_per_epoch=data.get("steps_per_epoch"),
        )


# ---------------------------------------------------------------- parsers


def parse_size(value: object, field_name: str) -> int:
    """Bytes from 1073741824, "1g", "512m", "1.5G", "2Gi", "256MB"."""
    if isinstance(value, bool) or value is None:
        raise _bad(field_name, value, "a size like 512m, 1g or a number of bytes")
    if isinstance(value, int):
        out = value
    elif isinstance(value, str) and (m := _SIZE_RE.match(value.strip())):
        out = int(float(m.group(1)) * _UNITS[m.group(2).lower()])
    else:
        raise _bad(field_name, value, "a size like 512m, 1g or a number of bytes")
    if out <= 0:
        raise _bad(field_name, value, "a positive size")
    return out


def parse_cpus(value: object, field_name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(field_name, value, f"a number of CPUs >= {MIN_CPUS}")
    out = float(value)
    if not math.isfinite(out) or out < MIN_CPUS:
        raise _bad(field_name, value, f"a number of CPUs >= {MIN_CPUS}")
    return out


def _volume_name_problem(name: str) -> str | None:
    if not VOLUME_NAME_RE.match(name):
        return (
            "a named volume (letters, digits, '_', '.', '-', starting with a letter or "
            "digit) or an absolute host path"
        )
    if name.startswith("flowcon-"):
        return "a volume name outside the executor's 'flowcon-' namespace"
    return None


def _target_problem(target: str) -> str | None:
    why = path_problem(target, absolute=True)
    if why:
        return why
    norm = posixpath.normpath("/" + target.strip("/"))
    if norm == "/":
        return "a target other than /"
    for bad in _FORBIDDEN_TARGETS:
        if norm == bad or norm.startswith(bad + "/") or bad.startswith(norm + "/"):
            return f"a target that does not cover {bad}"
    for bad in GPU_RUNTIME_TARGETS:
        if norm == bad or norm.startswith(bad + "/"):
            return f"a target outside {bad} (the GPU runtime reads mounts there as devices)"
    return None


def _source_problem(source: str) -> str | None:
    if not source.startswith("/"):
        return _volume_name_problem(source)
    why = path_problem(source, absolute=True)
    if why:
        return why
    norm = "/" + source.strip("/")
    if norm == "/":
        return "a host path other than / (the whole host)"
    if norm in DOCKER_SOCKETS:
        return "a host path other than the Docker socket (it gives root on the host)"
    return None


def _one_volume(raw: object, field_name: str) -> VolumeSpec:
    if isinstance(raw, str):
        parts = raw.split(":")
        mode = "rw"
        if len(parts) == 3:
            mode = parts.pop()
        if len(parts) != 2 or mode not in ("ro", "rw"):
            raise _bad(field_name, raw, "SOURCE:TARGET or SOURCE:TARGET:ro (or :rw)")
        source, target, read_only = parts[0], parts[1], mode == "ro"
    elif isinstance(raw, Mapping):
        unknown = sorted(str(k) for k in raw if k not in ("source", "target", "read_only"))
        if unknown:
            raise SpecKeyError(
                f"{field_name}.{unknown[0]}", "unknown field (known: source, target, read_only)"
            )
        for key in ("source", "target"):
            if not isinstance(raw.get(key), str):
                raise _bad(f"{field_name}.{key}", raw.get(key), "a string")
        source, target = str(raw["source"]), str(raw["target"])
        read_only = raw.get("read_only", False)
        if not isinstance(read_only, bool):
            raise _bad(f"{field_name}.read_only", read_only, "true or false")
    else:
        raise _bad(field_name, raw, "SOURCE:TARGET[:ro] or {source, target, read_only}")
    why = _source_problem(source)
    if why:
        raise _bad(f"{field_name}.source", source, why)
    why = _target_problem(target)
    if why:
        raise _bad(f"{field_name}.target", target, why)
    return VolumeSpec(source, "/" + target.strip("/"), read_only)


def parse_volumes(value: object) -> tuple[VolumeSpec, ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise _bad("volumes", value, "a list of SOURCE:TARGET[:ro] or {source, target, read_only}")
    out: list[VolumeSpec] = []
    seen: set[str] = set()
    for i, raw in enumerate(value):
        vol = _one_volume(raw, f"volumes[{i}]")
        if vol.target in seen:
            raise _bad(f"volumes[{i}].target", vol.target, "a target no other volume uses")
        seen.add(vol.target)
        out.append(vol)
    return tuple(out)


def parse_labels(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _bad("labels", value, "a mapping key: value")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str):
            raise _bad("labels", k, "string keys")
        if not _LABEL_KEY_RE.fullmatch(k):
            shape = "a label key of letters, digits and '.', '_', '-', '/' (a reverse DNS name)"
            raise _bad(f"labels.{k}", k, shape)
        if k == "flowcon" or k.startswith("flowcon.") or k.startswith("com.docker."):
            raise _bad(
                f"labels.{k}", k, "a key outside 'flowcon.' and 'com.docker.' (set by FlowCon)"
            )
        if not isinstance(v, str):
            raise _bad(f"labels.{k}", v, "a string (quote numbers and booleans)")
        why = label_problem(k, v)
        if why:
            raise _bad(f"labels.{k}", v, why)
        out[k] = v
    return out


def runtime_env_problem(key: str) -> str | None:
    """Why a job's environment may not set ``key`` (None: it may): it steers the GPU
    runtime or the dynamic loader (``RUNTIME_ENV_PREFIXES``, ``RUNTIME_ENV_KEYS``)."""
    upper = key.upper()
    if upper in RUNTIME_ENV_KEYS or upper.startswith(RUNTIME_ENV_PREFIXES):
        return (
            "is not allowed: it steers the GPU runtime or the dynamic loader (NVIDIA_*,"
            " CUDA_VISIBLE_DEVICES, DOCKER_RESOURCE_*, LD_*); the executor sets the GPUs"
        )
    return None


_USER_ALLOWED = "uid[:gid] (e.g. 1000 or 1000:1000, decimal numbers) or a user name[:group]"


def _user_part(part: str, value: object) -> str:
    """One side of ``uid:gid``: a number in canonical decimal, or a name as written."""
    if _ID_RE.match(part):
        number = int(part)
        if number > MAX_ID:
            raise _bad("user", value, f"uid[:gid] with ids up to {MAX_ID}")
        return str(number)
    if _NAME_RE.match(part):
        return part
    raise _bad("user", value, _USER_ALLOWED)


def parse_user(value: object) -> str | None:
    """``uid[:gid]`` or ``name[:group]`` (as ``docker run --user``), numeric parts in
    canonical decimal (``00:0100`` is ``0:100``): no sign, space or other digits."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str):
        raise _bad("user", value, _USER_ALLOWED)
    if isinstance(value, int):
        if not 0 <= value <= MAX_ID:
            raise _bad("user", value, f"uid[:gid] with a uid from 0 to {MAX_ID}")
        return str(value)
    parts = value.split(":")
    if len(parts) > 2 or not all(parts):
        raise _bad("user", value, _USER_ALLOWED)
    return ":".join(_user_part(p, value) for p in parts)


def split_user(user: str) -> tuple[int | str, int | str | None]:
    """(uid or name, gid or group or None) of a ``parse_user`` string: numbers as ints."""
    uid, _, gid = user.partition(":")
    return (
        int(uid) if _ID_RE.match(uid) else uid,
        None if not gid else int(gid) if _ID_RE.match(gid) else gid,
    )


IdRanges = tuple[tuple[int, int], ...]  # inclusive (first, last) ranges of uids or gids


def parse_id_ranges(value: object, field_name: str) -> IdRanges:
    """``1000-1999``, ``1000``, or a list of those (uids or gids) as inclusive ranges."""
    items = value if isinstance(value, list | tuple) else [value]
    allowed = "a range like 1000-1999, a number, or a list of them"
    out: list[tuple[int, int]] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool):
            first = last = item
        elif isinstance(item, str) and re.fullmatch(r"[0-9]{1,10}(-[0-9]{1,10})?", item):
            a, _, b = item.partition("-")
            first, last = int(a), int(b or a)
        else:
            raise _bad(field_name, item, allowed)
        if not 0 <= first <= last <= MAX_ID:
            raise _bad(field_name, item, f"first <= last, from 0 to {MAX_ID}")
        out.append((first, last))
    if not out:
        raise _bad(field_name, value, allowed)
    return tuple(out)


def in_ranges(number: int, ranges: IdRanges) -> bool:
    return any(first <= number <= last for first, last in ranges)


def show_ranges(ranges: IdRanges) -> str:
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in ranges)


def parse_workdir(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad("workdir", value, "an absolute path")
    why = path_problem(value, absolute=True)
    if why:
        raise _bad("workdir", value, why)
    return value


def parse_deadline_kind(value: object, best_effort: bool) -> bool:
    """soft_deadline from ``deadline_kind: hard|soft`` (default hard)."""
    if value is None:
        return False
    if value not in ("hard", "soft"):
        raise _bad("deadline_kind", value, "hard or soft")
    if value == "soft" and best_effort:
        raise _bad("deadline_kind", value, "hard (a best-effort job has no deadline)")
    return bool(value == "soft")


_T = TypeVar("_T")


def parse_pair(
    data: Mapping[str, object],
    per_worker: str,
    per_gpu: str,
    parse: Callable[[object, str], _T],
) -> tuple[_T | None, _T | None]:
    """(per-worker value, per-GPU value); at most one given."""
    a, b = data.get(per_worker), data.get(per_gpu)
    if a is not None and b is not None:
        raise _bad(per_gpu, b, f"either {per_worker} or {per_gpu}, not both")
    return (
        None if a is None else parse(a, per_worker),
        None if b is None else parse(b, per_gpu),
    )


def parse_shm(value: object) -> int | None:
    if value is None:
        return None
    out = parse_size(value, "shm_size")
    if out < MIN_SHM:
        raise _bad("shm_size", value, "at least 1m")
    return out


def parse_metric(value: object) -> MetricSpec | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise _bad(
            "metric", value, "a mapping {name, regex, goal, steps_per_line, steps_per_epoch}"
        )
    known = ("name", "regex", "goal", "steps_per_line", "steps_per_epoch")
    for k in value:
        if k not in known:
            raise SpecKeyError(f"metric.{k}", f"unknown field (known: {', '.join(known)})")
    name = value.get("name", "loss")
    if not isinstance(name, str) or not name.strip() or label_problem("k", name):
        raise _bad("metric.name", name, "a non-empty name without control characters")
    goal = value.get("goal", "min")
    if goal not in METRIC_GOALS:
        raise _bad("metric.goal", goal, "min or max")
    regex = value.get("regex")
    groups = _metric_groups(regex)
    per_line, per_epoch = _steps_keys(value)
    if groups is None:
        if per_line is not None or per_epoch is not None:
            raise SpecKeyError("metric.regex", "required with steps_per_line or steps_per_epoch")
    else:
        _check_step_source(str(regex), groups, per_line, per_epoch)
    return MetricSpec(name.strip(), regex, goal, per_line, per_epoch)


def _metric_groups(regex: object) -> Mapping[str, int] | None:
    """The named groups of ``metric.regex`` (None without one)."""
    if regex is None:
        return None
    if not isinstance(regex, str):
        raise _bad("metric.regex", regex, "a regular expression string")
    try:
        return compile_metric_regex(regex).groupindex
    except LabelError as exc:
        why = "does not compile" if "compile" in str(exc) else "has no (?P<value>...)"
        raise _bad(
            "metric.regex", regex, f"a regular expression with a (?P<value>...) group ({why})"
        ) from None


def _steps_keys(value: Mapping[str, object]) -> tuple[float | None, int | None]:
    """(steps_per_line, steps_per_epoch) of ``metric``."""
    per_line = value.get("steps_per_line")
    if per_line is not None:
        if (
            not isinstance(per_line, int | float)
            or isinstance(per_line, bool)
            or not math.isfinite(per_line)
            or per_line <= 0
        ):
            raise _bad("metric.steps_per_line", per_line, "a positive number")
        per_line = float(per_line)
    per_epoch = value.get("steps_per_epoch")
    if per_epoch is not None and (
        isinstance(per_epoch, bool) or not isinstance(per_epoch, int) or per_epoch < 1
    ):
        raise _bad("metric.steps_per_epoch", per_epoch, "an integer >= 1")
    return per_line, per_epoch


def _check_step_source(
    regex: str, groups: Mapping[str, int], per_line: float | None, per_epoch: int | None
) -> None:
    """One way to count steps: a ``step`` group, or an ``epoch`` group with
    ``steps_per_epoch``, or counted lines (``steps_per_line``)."""
    if "step" in groups and (per_line is not None or per_epoch is not None):
        raise _bad(
            "metric.steps_per_line" if per_line is not None else "metric.steps_per_epoch",
            per_line if per_line is not None else per_epoch,
            "nothing: the regex's (?P<step>...) group gives the steps",
        )
    if per_epoch is not None and "epoch" not in groups:
        raise _bad("metric.regex", regex, "a (?P<epoch>...) group with steps_per_epoch")
    if "epoch" in groups and "step" not in groups and per_epoch is None:
        raise SpecKeyError("metric.steps_per_epoch", "required with a (?P<epoch>...) group")
    if per_epoch is not None and per_line is not None:
        raise _bad("metric.steps_per_line", per_line, "nothing with steps_per_epoch")


def default_shm(memory: int | None) -> int:
    """/dev/shm when the spec gives none: 1 GiB, at most half the worker's memory limit
    (the tmpfs counts against the container's memory)."""
    return DEFAULT_SHM if memory is None else max(MIN_SHM, min(DEFAULT_SHM, memory // 2))
