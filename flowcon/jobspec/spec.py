"""The job spec a user submits: the paper's serverless interface (section 3.1) as YAML.

A job names an image and a command written as single-device training; the platform picks
the GPU count and tells the job its local batch size. Termination is a maximum number of
iterations; the deadline is absolute or relative to submission, or the job is best-effort.

Parsing is strict (the schema is a flowcon.schema model): unknown keys are errors (a typo
must not silently drop a deadline), types are not coerced, and every error names the
field, so a bad spec is rejected before anything is created. The name becomes part of
container names and labels, so it is a DNS label; the image must be an image reference; a
profile path may not climb out with '..', and the daemon reads no file a client names
(``allow_files=False``: the client inlines the points).

Example::

    name: resnet-small
    image: flowcon/elastic-example:latest
    command: ["python3", "/opt/train.py"]
    global_batch_size: 64
    batch_size_min: 32       # optional: the global batch may change within [min, max]
    batch_size_max: 256      # at a scale event (flowcon.alloc.batch.hybrid_batch)
    iterations: 2000
    deadline: 30m            # or "2025-06-01T12:00:00+00:00", or 1800, or best_effort: true
    min_gpus: 1
    max_gpus: 4
    profile: auto            # or a CSV/YAML file of gpus -> iterations/s, or an inline mapping
    volumes: ["/srv/data:/data:ro"]
    shm_size: 2g
    cpus_per_gpu: 4
    memory_per_gpu: 16g
    metric: {regex: 'Step (?P<step>[0-9]+) [|] loss (?P<value>[0-9.]+)'}

The container-facing keys (volumes, shm_size, cpus/memory, workdir, user, labels,
deadline_kind, metric) are checked in ``flowcon.jobspec.keys``; docs/jobs.md is
the reference of every key.
    launcher: none           # or torchrun, or flowcon (docs/jobs.md, "Launchers")
    scaling: stopfree        # or restart; unset: the image's flowcon.elastic label decides
"""

from __future__ import annotations

import csv
import io
import math
import re
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypedDict

import yaml
from pydantic import Field, field_validator

from flowcon.jobspec import keys
from flowcon.jobspec.keys import MetricSpec, SpecKeyError, VolumeSpec
from flowcon.schema import SchemaError, Strict, path_problem, show
from flowcon.schema import validate as schema_validate
from flowcon.textfile import NotText, read_text, safe_load_yaml

# a DNS label of at most 40 characters, starting with a letter: safe in container,
# service and network names and in label values
NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,38}[a-z0-9])?\Z")
NAME_RULE = (
    "a DNS label: lowercase letters, digits and '-', 1-40 chars, starting with a letter "
    "and ending with a letter or digit"
)
# what joins a job's name to the suffix of a name FlowCon derives from it (its pre-runs:
# ``NAME_p2``, ``NAME_m64``, ``NAME_p2b128``): no submitted name holds it, so no job is
# named as another job's derived name and shares its containers, volume or network
DERIVED_SEP = "_"
DERIVED_RULE = (
    f"{DERIVED_SEP!r} is reserved for the names FlowCon derives from a job's name "
    f"(its pre-runs: NAME{DERIVED_SEP}p2, NAME{DERIVED_SEP}m64)"
)
# registry[:port]/path:tag@digest, as docker accepts it
IMAGE_RE = re.compile(
    r"^(?:(?:localhost|[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)+)(?::[0-9]{1,5})?/"
    r"|[a-zA-Z0-9-]+:[0-9]{1,5}/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[a-f0-9]{64})?\Z"
)
IMAGE_RULE = "an image reference such as repo/name:tag (no spaces or shell characters)"
_DURATION_RE = re.compile(
    r"^(?:(\d+(?:\.\d+)?)d)?(?:(\d+(?:\.\d+)?)h)?(?:(\d+(?:\.\d+)?)m)?"
    r"(?:(\d+(?:\.\d+)?)s)?\Z"
)
# how a job's command is started in its containers (docs/jobs.md, "Launchers"): "none" runs
# it as one process per container and container per worker with torchrun's environment, the
# form that runs the most scripts unchanged; "torchrun" runs it under the image's torchrun,
# one container per node; "flowcon" runs it once per node for flowcon.elastic's main
Launcher = Literal["none", "torchrun", "flowcon"]
LAUNCHERS: tuple[Launcher, ...] = ("none", "torchrun", "flowcon")
DEFAULT_LAUNCHER: Launcher = "none"
# how a rescale changes the job's containers (docs/jobs.md, "scaling"): "restart" is the
# checkpoint-restart of every container, "stopfree" starts only the joining containers and
# lets the leaving ones go while the others keep training (flowcon.elastic's stop-free
# runtime, EDL section 4.2). Unset: stop-free when the image carries the label
# flowcon.elastic=stopfree and the launcher is flowcon, else restart (decided at launch).
Scaling = Literal["stopfree", "restart"]
SCALINGS: tuple[Scaling, ...] = ("stopfree", "restart")
_ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")


class JobSpecError(ValueError):
    """A spec problem, tied to the field that causes it."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message
        self.problems: list[str] = [f"{field_name}: {message}"]


@dataclass(frozen=True)
class ThroughputProfile:
    """Measured iterations/s by GPU count (the job's scaling curve)."""

    points: tuple[tuple[int, float], ...]

    def as_dict(self) -> dict[int, float]:
        return dict(self.points)

    @staticmethod
    def from_mapping(
        data: Mapping[Any, object],  # keys of any type: YAML's integers, a CSV's strings
        field_name: str = "profile",
    ) -> ThroughputProfile:
        points: dict[int, float] = {}
        for raw_gpus, raw_rate in data.items():
            gpus = _positive_int(raw_gpus, f"{field_name}[{raw_gpus!r}]")
            rate = _positive_float(raw_rate, f"{field_name}[{gpus}]")
            points[gpus] = rate
        if not points:
            raise JobSpecError(field_name, "empty throughput profile")
        return ThroughputProfile(tuple(sorted(points.items())))


@dataclass(frozen=True)
class JobSpec:
    name: str
    image: str
    command: tuple[str, ...]
    global_batch_size: int
    iterations: int
    submit_time: float
    deadline: float | None = None  # epoch seconds; None iff best_effort
    best_effort: bool = False
    min_gpus: int = 1
    max_gpus: int | None = None
    profile: ThroughputProfile | None = None
    profile_auto: bool = False
    env: Mapping[str, str] = field(default_factory=dict)
    # container-facing keys (flowcon.jobspec.keys; docs/jobs.md)
    volumes: tuple[VolumeSpec, ...] = ()
    shm_size: int | None = None  # bytes; None: jobspec_keys.default_shm(memory)
    cpus: float | None = None  # per worker container
    cpus_per_gpu: float | None = None
    memory: int | None = None  # bytes per worker container
    memory_per_gpu: int | None = None
    workdir: str | None = None
    user: str | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    soft_deadline: bool = False  # deadline_kind: soft
    metric: MetricSpec | None = None
    launcher: str = DEFAULT_LAUNCHER  # LAUNCHERS; see flowcon.executor.launchers and docs/jobs.md
    scaling: str | None = None  # SCALINGS, or None: decided from the image's label at launch
    # the global batch's permissible range (Saxena's batch-size dimension; docs/jobs.md):
    # both None (the batch stays global_batch_size) or both set, min <= global <= max
    batch_size_min: int | None = None
    batch_size_max: int | None = None
    # measured by the pre-run for a job with a batch range (not spec keys, stored): its
    # speed at other global batches (batch -> GPU count -> iterations of global_batch_size
    # per second, i.e. samples/s over it) and the largest per-worker batch that fits the
    # worker's memory (None: not probed)
    batch_profile: Mapping[int, Mapping[int, float]] = field(default_factory=dict)
    max_local_batch: int | None = None
    # assigned by the allocator (not spec keys, not stored): the global batch the job's new
    # containers run at, picked from the range (None: global_batch_size), and
    run_batch: int | None = None
    # the job's master port on host networking,
    # unique among live jobs, kept in the job's record (flowcon.executor.workers)
    master_port: int | None = None
    # the job's rendezvous secret (set by the allocator with the master port, kept in the
    # record, never shown by the API nor in a repr; flowcon.elastic.rendezvous)
    rendezvous_secret: str | None = field(default=None, repr=False)
    # who submitted it (set by the allocator from the caller's token, never a spec key;
    # kept in the record; None: a record from before owners, the legacy ``user``)
    owner: str | None = None

    @property
    def batch_range(self) -> tuple[int, int] | None:
        """(batch_size_min, batch_size_max), or None when the global batch is fixed."""
        if self.batch_size_min is None or self.batch_size_max is None:
            return None
        return self.batch_size_min, self.batch_size_max

    def gpu_counts_to_profile(self, available: int) -> list[int]:
        """GPU counts for the pre-run: 1, 2, 4, ... within [min_gpus, max_gpus] and the cluster."""
        top = min(available, self.max_gpus) if self.max_gpus is not None else available
        counts: list[int] = []
        n = 1
        while n <= top:
            if n >= self.min_gpus:
                counts.append(n)
            n *= 2
        if self.min_gpus <= top and self.min_gpus not in counts:
            counts.insert(0, self.min_gpus)
        return sorted(set(counts))

    def with_profile(self, profile: ThroughputProfile) -> JobSpec:
        from dataclasses import replace

        return replace(self, profile=profile, profile_auto=False)


# ---------------------------------------------------------------- parsing


def load_jobspec(path: str | Path, now: float | None = None) -> JobSpec:
    """Read a spec file; a relative profile path is resolved against the spec's folder."""
    p = Path(path)
    try:
        text = read_text(p)
    except OSError as exc:
        raise JobSpecError("file", f"cannot read {p}: {exc.strerror or exc}") from exc
    except NotText as exc:
        raise JobSpecError("file", f"{p}, {exc}") from None
    try:
        return parse_jobspec(text, base_dir=p.parent, now=now)
    except JobSpecError as exc:
        exc.args = (f"{p}: {exc}",)  # the field and why, after the file they are in
        raise


def _load(source: str | Mapping[str, object]) -> object:
    """The document: YAML text parsed, a mapping as it is."""
    if not isinstance(source, str):
        return source
    try:
        return safe_load_yaml(source)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise JobSpecError("yaml", f"not valid YAML{where}") from exc


def _deadline(data: Mapping[str, object], submit: float) -> tuple[bool, float | None]:
    """(best_effort, absolute deadline): exactly one of the two."""
    best_effort = data.get("best_effort", False)
    if not isinstance(best_effort, bool):
        raise JobSpecError("best_effort", "must be true or false")
    deadline: float | None = None
    if "deadline" in data and data["deadline"] is not None:
        if best_effort:
            raise JobSpecError("deadline", "give a deadline or best_effort: true, not both")
        deadline = parse_deadline(data["deadline"], submit)
        if deadline <= submit:
            raise JobSpecError("deadline", "is in the past")
    elif not best_effort:
        raise JobSpecError("deadline", "required (or set best_effort: true)")
    return best_effort, deadline


def _gpu_bounds(f: SpecFields) -> tuple[int, int | None]:
    """(min_gpus, max_gpus); the global batch must split over min_gpus."""
    if f.max_gpus is not None and f.max_gpus < f.min_gpus:
        raise JobSpecError("max_gpus", f"{f.max_gpus} is below min_gpus {f.min_gpus}")
    if f.global_batch_size < f.min_gpus:
        raise JobSpecError(
            "global_batch_size", f"{f.global_batch_size} cannot be split over min_gpus {f.min_gpus}"
        )
    return f.min_gpus, f.max_gpus


def _batch_range(f: SpecFields) -> tuple[int | None, int | None]:
    """(batch_size_min, batch_size_max): both None, or both set (an unset one is
    global_batch_size) with min <= global_batch_size <= max and min splittable over
    min_gpus (the rule ``_gpu_bounds`` applies to global_batch_size: every GPU gets a
    sample at the smallest batch on the fewest GPUs)."""
    if f.batch_size_min is None and f.batch_size_max is None:
        return None, None
    gbs = f.global_batch_size
    low = gbs if f.batch_size_min is None else f.batch_size_min
    high = gbs if f.batch_size_max is None else f.batch_size_max
    if low > gbs:
        raise JobSpecError("batch_size_min", f"{low} is above global_batch_size {gbs}")
    if high < gbs:
        raise JobSpecError("batch_size_max", f"{high} is below global_batch_size {gbs}")
    if low < f.min_gpus:
        raise JobSpecError("batch_size_min", f"{low} cannot be split over min_gpus {f.min_gpus}")
    return low, high


def _profile(raw_profile: object, base_dir: str | Path) -> tuple[ThroughputProfile | None, bool]:
    """(profile, profile_auto): none or 'auto' is measured, a mapping or a file is given."""
    if raw_profile is None or raw_profile == "auto":
        return None, True  # nothing known: measure it
    if isinstance(raw_profile, Mapping):
        return ThroughputProfile.from_mapping(raw_profile), False
    if isinstance(raw_profile, str):
        return load_profile(Path(base_dir) / raw_profile), False
    raise JobSpecError("profile", "must be 'auto', a file path or a mapping gpus -> iters/s")


class SpecFields(Strict):
    """The spec's fields as the schema checks them; deadline, profile, command and env
    take several forms and are checked after, by the functions below (naming the field)."""

    name: str = Field(description=NAME_RULE)
    image: str = Field(description=IMAGE_RULE)
    command: object = Field(description="a string or a list of strings")
    global_batch_size: int = Field(ge=1, description="an integer >= 1")
    batch_size_min: int | None = Field(None, ge=1, description="an integer >= 1, or null")
    batch_size_max: int | None = Field(None, ge=1, description="an integer >= 1, or null")
    iterations: int = Field(ge=1, description="an integer >= 1")
    deadline: object = Field(None, description="an ISO time or a duration like 30m")
    best_effort: bool = Field(False, description="true or false")
    min_gpus: int = Field(1, ge=1, description="an integer >= 1")
    max_gpus: int | None = Field(None, ge=1, description="an integer >= 1, or null")
    profile: object = Field(None, description="'auto', a file path or a mapping gpus -> iters/s")
    env: object = Field(default_factory=dict, description="a mapping NAME: value")
    volumes: object = Field(None, description="a list of SOURCE:TARGET[:ro] or mappings")
    shm_size: object = Field(None, description="a size like 1g")
    cpus: object = Field(None, description="CPUs per worker container")
    cpus_per_gpu: object = Field(None, description="CPUs per GPU")
    memory: object = Field(None, description="a size per worker container, like 16g")
    memory_per_gpu: object = Field(None, description="a size per GPU, like 8g")
    workdir: object = Field(None, description="an absolute path")
    user: object = Field(None, description="uid[:gid] or a user name")
    labels: object = Field(None, description="a mapping key: value")
    deadline_kind: object = Field(None, description="hard or soft")
    metric: object = Field(None, description="a mapping {name, regex, goal}")
    launcher: Launcher = Field(DEFAULT_LAUNCHER, description="none, torchrun or flowcon")
    scaling: Scaling | None = Field(None, description="stopfree or restart")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if DERIVED_SEP in value:
            raise ValueError(f"{DERIVED_RULE}; {NAME_RULE}")
        if not NAME_RE.match(value):
            raise ValueError(NAME_RULE)
        return value

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        if len(value) > 255 or not IMAGE_RE.match(value):
            raise ValueError(IMAGE_RULE)
        return value


KNOWN_KEYS = frozenset(SpecFields.model_fields)


def _fields(data: Mapping[str, object]) -> SpecFields:
    """The schema's view of the spec; JobSpecError names the first bad field (all of them
    are in ``problems``)."""
    if any(not isinstance(k, str) for k in data):
        bad = next(k for k in data if not isinstance(k, str))
        raise JobSpecError(str(bad), "unknown field (field names are strings)")
    try:
        return schema_validate(SpecFields, data, "")
    except SchemaError as exc:
        first = exc.problems[0]
        text = str(first).split(": ", 1)[1] if ": " in str(first) else first.allowed
        err = JobSpecError(first.field, text)
        err.problems = [str(p) for p in exc.problems]
        raise err from None


def parse_jobspec(
    source: str | Mapping[str, object],
    base_dir: str | Path = ".",
    now: float | None = None,
    allow_files: bool = True,
) -> JobSpec:
    """A spec from YAML text or a mapping. ``allow_files=False`` (the daemon) refuses a
    profile given as a file path: the client reads its own files."""
    data = _load(source)
    if not isinstance(data, Mapping):
        raise JobSpecError("spec", "must be a mapping of fields")
    submit = time.time() if now is None else now
    f = _fields(data)
    command = _command(f.command)
    if f.launcher == "torchrun" and (
        command[0].rsplit("/", 1)[-1] == "torchrun" or "torch.distributed.run" in command[:3]
    ):
        raise JobSpecError("command", "starts torchrun: launcher: torchrun adds it, drop it")
    if f.scaling == "stopfree" and f.launcher != "flowcon":
        raise JobSpecError(
            "scaling",
            f"stopfree needs launcher: flowcon (flowcon.elastic's launcher process hosts the "
            f"job's store and forwards the leave signal), not {f.launcher}",
        )
    best_effort, deadline = _deadline(data, submit)
    min_gpus, max_gpus = _gpu_bounds(f)
    batch_min, batch_max = _batch_range(f)
    if isinstance(f.profile, str) and f.profile != "auto":
        why = path_problem(f.profile)
        if why:
            raise JobSpecError("profile", f"{show(f.profile)} is not allowed: {why}")
        if not allow_files:
            raise JobSpecError("profile", "a file path is read by the client: send the points")
    profile, profile_auto = _profile(f.profile, base_dir)
    try:
        extra = _container_keys(data, best_effort)
    except SpecKeyError as exc:
        raise JobSpecError(exc.field, exc.message) from None
    return JobSpec(
        name=f.name,
        image=f.image,
        command=command,
        global_batch_size=f.global_batch_size,
        iterations=f.iterations,
        submit_time=submit,
        deadline=deadline,
        best_effort=best_effort,
        min_gpus=min_gpus,
        max_gpus=max_gpus,
        profile=profile,
        profile_auto=profile_auto,
        env=_env(f.env),
        **extra,
        launcher=f.launcher,
        scaling=f.scaling,
        batch_size_min=batch_min,
        batch_size_max=batch_max,
    )


class _ContainerKeys(TypedDict):
    volumes: tuple[VolumeSpec, ...]
    shm_size: int | None
    cpus: float | None
    cpus_per_gpu: float | None
    memory: int | None
    memory_per_gpu: int | None
    workdir: str | None
    user: str | None
    labels: dict[str, str]
    soft_deadline: bool
    metric: MetricSpec | None


def _container_keys(data: Mapping[str, object], best_effort: bool) -> _ContainerKeys:
    """The container-facing keys (``flowcon.jobspec.keys``) as JobSpec fields."""
    cpus, cpus_per_gpu = keys.parse_pair(data, "cpus", "cpus_per_gpu", keys.parse_cpus)
    memory, memory_per_gpu = keys.parse_pair(data, "memory", "memory_per_gpu", keys.parse_size)
    for name, value in (("memory", memory), ("memory_per_gpu", memory_per_gpu)):
        if value is not None and value < keys.MIN_MEMORY:
            raise SpecKeyError(name, f"{show(data[name])} is not allowed: at least 6m")
    return {
        "volumes": keys.parse_volumes(data.get("volumes")),
        "shm_size": keys.parse_shm(data.get("shm_size")),
        "cpus": cpus,
        "cpus_per_gpu": cpus_per_gpu,
        "memory": memory,
        "memory_per_gpu": memory_per_gpu,
        "workdir": keys.parse_workdir(data.get("workdir")),
        "user": keys.parse_user(data.get("user")),
        "labels": keys.parse_labels(data.get("labels")),
        "soft_deadline": keys.parse_deadline_kind(data.get("deadline_kind"), best_effort),
        "metric": keys.parse_metric(data.get("metric")),
    }


def parse_duration(text: str) -> float:
    """'90', '90s', '30m', '2h', '1h30m', '1d' -> seconds."""
    s = text.strip().lower().replace(" ", "")
    try:
        return float(s)
    except ValueError:
        pass
    m = _DURATION_RE.match(s)
    if not s or m is None or not any(m.groups()):
        raise ValueError(f"not a duration: {text!r}")
    d, h, mi, se = (float(g) if g else 0.0 for g in m.groups())
    return d * 86400 + h * 3600 + mi * 60 + se


def parse_deadline(value: object, now: float) -> float:
    """Absolute ISO 8601 time (naive = local time) or a duration after ``now``."""
    if isinstance(value, bool):
        raise JobSpecError("deadline", "must be a time or a duration")
    if isinstance(value, int | float):
        if not math.isfinite(value) or value <= 0:
            raise JobSpecError("deadline", "duration must be positive seconds")
        return now + float(value)
    if isinstance(value, datetime):  # YAML turns unquoted timestamps into datetimes
        return value.timestamp()
    if not isinstance(value, str):
        raise JobSpecError("deadline", "must be an ISO time or a duration like 30m")
    try:
        return now + parse_duration(value)
    except ValueError:
        pass
    try:
        return datetime.fromisoformat(value.strip()).timestamp()
    except ValueError:
        raise JobSpecError(
            "deadline", f"{value!r} is neither an ISO time nor a duration like 30m/2h/90s"
        ) from None


def load_profile(path: Path) -> ThroughputProfile:
    """A CSV (gpus,iterations_per_s; header optional) or YAML mapping gpus -> iterations/s."""
    try:
        text = read_text(path)
    except OSError as exc:
        raise JobSpecError("profile", f"cannot read {path}: {exc.strerror or exc}") from exc
    except NotText as exc:
        raise JobSpecError("profile", f"{path}, {exc}") from None
    if path.suffix.lower() in {".yaml", ".yml"}:
        return _yaml_profile(path, text)
    rows: dict[str, str] = {}
    try:
        table = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:  # a cell over the csv module's field size limit, ...
        raise JobSpecError("profile", f"{path.name}: not a CSV table: {exc}") from None
    for lineno, row in enumerate(table, start=1):
        cells = [c.strip() for c in row]
        if not cells or not any(cells) or cells[0].startswith("#"):
            continue
        if len(cells) < 2:
            raise JobSpecError("profile", f"{path.name} line {lineno}: need gpus,iterations_per_s")
        if lineno == 1 and not cells[0].isdigit():
            continue  # header
        rows[cells[0]] = cells[1]
    return ThroughputProfile.from_mapping(rows)


def _yaml_profile(path: Path, text: str) -> ThroughputProfile:
    """A YAML profile: a mapping gpus -> iterations/s, or a list of {gpus, throughput}."""
    try:
        data = safe_load_yaml(text)
    except yaml.YAMLError:
        raise JobSpecError("profile", f"{path.name} is not valid YAML") from None
    if isinstance(data, list):  # [{gpus: 1, throughput: 10}, ...]
        try:
            data = {row["gpus"]: row.get("throughput", row.get("iterations_per_s")) for row in data}
        except (TypeError, KeyError):
            raise JobSpecError("profile", "list rows need 'gpus' and 'throughput'") from None
    if not isinstance(data, Mapping):
        raise JobSpecError("profile", f"{path.name} must map gpus -> iterations/s")
    return ThroughputProfile.from_mapping(data)


def _positive_int(value: object, name: str) -> int:
    if isinstance(value, bool):
        raise JobSpecError(name, "must be a positive integer")
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or value <= 0:
        raise JobSpecError(name, f"must be a positive integer, got {value!r}")
    return value


def _positive_float(value: object, name: str) -> float:
    if not isinstance(value, str | int | float):
        raise JobSpecError(name, f"must be a number, got {value!r}")
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise JobSpecError(name, f"must be a number, got {value!r}") from None
    if isinstance(value, bool) or not math.isfinite(out) or out <= 0:
        raise JobSpecError(name, f"must be a positive finite number, got {value!r}")
    return out


def _command(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        try:
            parts = shlex.split(value)
        except ValueError as exc:
            raise JobSpecError("command", f"cannot split: {exc}") from None
    elif isinstance(value, list) and all(isinstance(v, str | int | float) for v in value):
        parts = [str(v) for v in value]
    else:
        raise JobSpecError("command", "must be a string or a list of strings")
    if not parts:
        raise JobSpecError("command", "is empty")
    if any("\x00" in p for p in parts):
        raise JobSpecError("command", "contains a NUL character")
    return tuple(parts)


def _env(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise JobSpecError("env", "must be a mapping NAME: value")
    out: dict[str, str] = {}
    for k, v in value.items():
        if not isinstance(k, str) or not _ENV_KEY_RE.match(k):
            raise JobSpecError(f"env.{k}", "not a valid variable name")
        if k.startswith("FLOWCON_") or k in _RESERVED_ENV:
            raise JobSpecError(f"env.{k}", "is set by the executor")
        why = keys.runtime_env_problem(k)
        if why:
            raise JobSpecError(f"env.{k}", why)
        if isinstance(v, Mapping | list) or v is None:
            raise JobSpecError(f"env.{k}", "must be a scalar")
        out[k] = str(v).lower() if isinstance(v, bool) else str(v)
        if "\x00" in out[k]:
            raise JobSpecError(f"env.{k}", "contains a NUL character")
    return out


_RESERVED_ENV = frozenset(
    {
        "WORLD_SIZE",
        "RANK",
        "LOCAL_RANK",
        "LOCAL_WORLD_SIZE",
        "GROUP_RANK",
        "MASTER_ADDR",
        "MASTER_PORT",
        "NODE_RANK",
    }
)
