"""The allocator's answers as types, shared by the daemon (which builds them from its
records, ``to_json`` for the wire) and the client commands (``from_json`` of what they
receive). The JSON on the wire is the contract (docs/allocator.md, "API"): each
``to_json`` writes the keys in the order the API always wrote them.

``from_json`` reads an answer leniently (a missing key gets the default the commands
showed for it), so a client still reads a daemon of another version.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Protocol

from flowcon.allocator.records import Json, JsonObject, spec_json
from flowcon.allocator.store import LEGACY_OWNER, Event, JobRecord
from flowcon.jobspec.spec import JobSpec

if TYPE_CHECKING:
    from _typeshed import DataclassInstance


class Answer(Protocol):
    """An answer the API sends (its body is ``to_json()``)."""

    def to_json(self) -> JsonObject: ...


def _plain(view: DataclassInstance) -> JsonObject:
    """A view's fields as a JSON object, in field order (nested views not expanded)."""
    return {f.name: getattr(view, f.name) for f in fields(view)}


def _num(value: Json, default: float = 0.0) -> float:
    return float(value) if value else default


def _opt_float(value: Json) -> float | None:
    return None if value is None else float(value)


class SpecTexts:
    """The JSON text of each spec as the job list shows it (env values "***"), by spec
    object: a ``JobSpec`` is immutable and the store hands out one object per stored text.
    At most ``size`` entries; a full cache starts over."""

    def __init__(self, size: int = 50_000) -> None:
        self.size = size
        self._texts: dict[int, tuple[JobSpec, str]] = {}
        self._lock = threading.Lock()

    def __call__(self, spec: JobSpec) -> str:
        known = self._texts.get(id(spec))
        if known is not None and known[0] is spec:
            return known[1]
        text = json.dumps(spec_json(spec, redact=True), default=str)
        with self._lock:
            if len(self._texts) >= self.size:
                self._texts = {}
            self._texts[id(spec)] = (spec, text)
        return text


@dataclass(frozen=True)
class JobView:
    """One job as ``GET /api/v1/jobs`` lists it (and ``DELETE`` answers): its record,
    its curves by GPU count (keys as strings, JSON's), and its spec with env values
    hidden."""

    name: str
    state: str
    submit_time: float | None
    deadline: float | None
    soft_deadline: bool
    iterations: float
    done_iterations: float
    progress: float
    gpus: int
    placement: list[list[int]]  # [[node index, GPU index], ...]
    predicted_finish: float | None
    reason: str
    finish_time: float | None
    profile: dict[str, float]
    measured: dict[str, float]
    measured_samples: dict[str, int]
    deadline_met: bool | None
    spec: JsonObject  # the spec's JSON as stored, env values "***"
    owner: str = LEGACY_OWNER  # who submitted it (an older allocator's answer: the legacy)

    @staticmethod
    def fields_of(rec: JobRecord) -> JsonObject:
        """The record's fields as ``JobView`` has them."""
        return {
            **JobView._head(rec),
            "spec": spec_json(rec.spec, redact=True),
            "owner": rec.owner,
        }

    @staticmethod
    def _head(rec: JobRecord) -> JsonObject:
        """``fields_of`` up to the spec (``encoded`` adds the spec and the owner)."""
        return {
            "name": rec.name,
            "state": rec.state,
            "submit_time": rec.submit_time,
            "deadline": rec.deadline,
            "soft_deadline": rec.soft_deadline,
            "iterations": rec.iterations,
            "done_iterations": rec.done_iterations,
            "progress": rec.progress,
            "gpus": rec.gpus,
            "placement": rec.placement,
            "predicted_finish": rec.predicted_finish,
            "reason": rec.reason,
            "finish_time": rec.finish_time,
            "profile": {str(k): v for k, v in sorted(rec.profile.items())},
            "measured": {str(k): v for k, v in sorted(rec.measured.items())},
            "measured_samples": {str(k): int(v) for k, v in sorted(rec.measured_n.items())},
            "deadline_met": rec.deadline_met,
        }

    @classmethod
    def of(cls, rec: JobRecord) -> JobView:
        return cls(**cls.fields_of(rec))

    @staticmethod
    def encoded(rec: JobRecord, spec_text: str) -> str:
        """``json.dumps(JobView.of(rec).to_json(), default=str)`` with the spec's part given
        as its JSON text (``SpecTexts``): a list of thousands of jobs encodes each spec once,
        not on every change of the job's progress."""
        body = json.dumps(JobView._head(rec), default=str)
        return f'{body[:-1]}, "spec": {spec_text}, "owner": {json.dumps(rec.owner)}}}'

    def to_json(self) -> JsonObject:
        return _plain(self)

    @staticmethod
    def read(data: Mapping[str, Json]) -> JsonObject:
        """``from_json``'s fields (a subclass adds its own)."""
        return {
            "name": str(data.get("name")),
            "state": str(data.get("state")),
            "submit_time": _opt_float(data.get("submit_time")),
            "deadline": _opt_float(data.get("deadline")),
            "soft_deadline": bool(data.get("soft_deadline")),
            "iterations": _num(data.get("iterations")),
            "done_iterations": _num(data.get("done_iterations")),
            "progress": _num(data.get("progress")),
            "gpus": int(data.get("gpus", 0)),
            "placement": [list(p) for p in data.get("placement") or []],
            "predicted_finish": _opt_float(data.get("predicted_finish")),
            "reason": str(data.get("reason") or ""),
            "finish_time": _opt_float(data.get("finish_time")),
            "profile": dict(data.get("profile") or {}),
            "measured": dict(data.get("measured") or {}),
            "measured_samples": dict(data.get("measured_samples") or {}),
            "deadline_met": data.get("deadline_met"),
            "spec": dict(data.get("spec") or {}),
            "owner": str(data.get("owner") or LEGACY_OWNER),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> JobView:
        return cls(**cls.read(data))


@dataclass(frozen=True)
class AdmissionView:
    """One admission decision on a job."""

    id: int
    ts: float
    job: str
    admitted: bool
    reason: str
    min_share: Json  # job -> GPUs per slot, as the policy gave it (None: no reservation)
    measured: bool

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> AdmissionView:
        return cls(
            id=int(data.get("id") or 0),
            ts=_num(data.get("ts")),
            job=str(data.get("job") or ""),
            admitted=bool(data.get("admitted")),
            reason=str(data.get("reason") or ""),
            min_share=data.get("min_share"),
            measured=bool(data.get("measured")),
        )


@dataclass(frozen=True)
class AllocationView:
    """The job's GPUs from ``ts`` on."""

    ts: float
    gpus: int
    placement: list[list[int]]

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> AllocationView:
        return cls(
            _num(data.get("ts")),
            int(data.get("gpus") or 0),
            [list(p) for p in data.get("placement") or []],
        )


@dataclass(frozen=True)
class EventView:
    """One event of the job's log; ``data`` holds the event kind's own fields, which the
    wire shows beside ``id``, ``ts``, ``kind`` and ``job``."""

    id: int
    ts: float
    kind: str
    job: str | None
    data: JsonObject = field(default_factory=dict)

    @classmethod
    def of(cls, event: Event) -> EventView:
        return cls(event.id, event.ts, event.kind, event.job, dict(event.data))

    def to_json(self) -> JsonObject:
        return {"id": self.id, "ts": self.ts, "kind": self.kind, "job": self.job, **self.data}

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> EventView:
        own = {k: v for k, v in data.items() if k not in ("id", "ts", "kind", "job")}
        job = data.get("job")
        return cls(
            int(data.get("id") or 0),
            _num(data.get("ts")),
            str(data.get("kind")),
            None if job is None else str(job),
            own,
        )


@dataclass(frozen=True)
class JobDetail(JobView):
    """One job as ``GET /api/v1/jobs/{name}`` shows it: the listing's fields, its curve
    now (measured points over the profile), its admissions, GPUs over time, events and
    the containers that run it."""

    curve: dict[str, float] = field(default_factory=dict)
    admissions: list[AdmissionView] = field(default_factory=list)
    allocations: list[AllocationView] = field(default_factory=list)
    events: list[EventView] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    # an operator's pin ({gpus, node, by, ts}: ``flowcon scale``/``migrate``), if any
    pin: dict[str, Json] | None = None
    # GPUs placement keeps off because this job's straggler left them ({node, gpu, until})
    avoided: list[dict[str, Json]] = field(default_factory=list)

    def to_json(self) -> JsonObject:
        out = _plain(self)
        out["admissions"] = [_plain(a) for a in self.admissions]
        out["allocations"] = [_plain(a) for a in self.allocations]
        out["events"] = [e.to_json() for e in self.events]
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> JobDetail:
        return cls(
            **cls.read(data),
            curve=dict(data.get("curve") or {}),
            admissions=[AdmissionView.from_json(a) for a in data.get("admissions") or []],
            allocations=[AllocationView.from_json(a) for a in data.get("allocations") or []],
            events=[EventView.from_json(e) for e in data.get("events") or []],
            containers=[str(c) for c in data.get("containers") or []],
            pin=_mapping_or_none(data.get("pin")),
            avoided=[dict(a) for a in data.get("avoided") or [] if isinstance(a, Mapping)],
        )


def _mapping_or_none(value: Json) -> dict[str, Json] | None:
    return dict(value) if isinstance(value, Mapping) else None


@dataclass(frozen=True)
class ProfilingAnswer:
    """The answer to a ``profile: auto`` submit (HTTP 202) or its dry run: the job is
    pre-run at ``counts`` GPUs first, admission is decided after."""

    name: str
    reason: str
    counts: list[int]
    dry_run: bool | None = None  # True for a dry run (shown only then)
    profile_seconds: float | None = None  # the submit's: each count's longest run

    def to_json(self) -> JsonObject:
        out: JsonObject = {"name": self.name, "decision": "profiling", "admitted": None}
        if self.dry_run is not None:
            out["dry_run"] = self.dry_run
        out.update(reason=self.reason, gpus=0, counts=self.counts)
        if self.profile_seconds is not None:
            out["profile_seconds"] = self.profile_seconds
        return out


@dataclass(frozen=True)
class SubmitAnswer:
    """What the client reads of any decision answer: a submit's, a dry run's
    (``flowcon.allocator.planner.SubmitResult``, ``DryRunResult``), a profiling one's
    (``ProfilingAnswer``), or the decision a profiled job got. ``json`` is the answer as
    received (``flowcon submit --json`` prints it)."""

    name: str | None
    decision: str | None  # admitted, dropped, profiling or cancelled
    admitted: bool | None
    reason: str
    gpus: int
    revoked: list[str]  # admitted jobs whose guarantee this decision gave up
    predicted_finish: float | None  # a dry run's
    deadline: float | None  # a dry run's
    now: float | None  # a dry run's: when it was decided
    counts: list[int]  # profiling: the GPU counts of the pre-run
    profile_seconds: Json  # profiling: as the daemon said it ("?" when it did not)
    json: JsonObject

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> SubmitAnswer:
        name = data.get("name")
        admitted = data.get("admitted")
        return cls(
            name=None if name is None else str(name),
            decision=None if data.get("decision") is None else str(data.get("decision")),
            admitted=None if admitted is None else bool(admitted),
            reason=str(data.get("reason", "")),
            gpus=int(data.get("gpus") or 0),
            revoked=[str(n) for n in data.get("revoked") or ()],
            predicted_finish=_opt_float(data.get("predicted_finish")),
            deadline=_opt_float(data.get("deadline")),
            now=_opt_float(data.get("now")),
            counts=[int(c) for c in data.get("counts") or []],
            profile_seconds=data.get("profile_seconds", "?"),
            json=dict(data),
        )


@dataclass(frozen=True)
class LogLineView:
    """One line of a worker's output."""

    rank: int
    node: str
    ts_ns: int
    text: str

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> LogLineView:
        return cls(
            int(data.get("rank") or 0),
            str(data.get("node") or ""),
            int(data.get("ts_ns") or 0),
            str(data.get("text", "")),
        )


@dataclass(frozen=True)
class LogPage:
    """One page of ``GET /api/v1/jobs/{name}/logs``: the job's state, its workers' ranks,
    their lines newer than the page's ``after`` in time order, and the ``cursor`` the
    next page asks ``after``; ``note`` says why there are none (no executor)."""

    job: str
    state: str
    ranks: list[int]
    lines: list[LogLineView]
    cursor: str
    note: str | None = None

    def to_json(self) -> JsonObject:
        out: JsonObject = {
            "job": self.job,
            "state": self.state,
            "ranks": self.ranks,
            "lines": [_plain(ln) for ln in self.lines],
        }
        if self.note is not None:
            out["note"] = self.note
        out["cursor"] = self.cursor
        return out

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> LogPage:
        note = data.get("note")
        return cls(
            job=str(data.get("job") or ""),
            state=str(data.get("state") or ""),
            ranks=[int(r) for r in data.get("ranks") or []],
            lines=[LogLineView.from_json(ln) for ln in data.get("lines") or []],
            cursor=str(data.get("cursor") or ""),
            note=None if not note else str(note),
        )


@dataclass(frozen=True)
class NodeView:
    """One node as ``flowcon nodes`` shows it (``kubectl get nodes``' columns)."""

    name: str
    gpus: int
    used: int
    status: str  # Ready | Draining | Drained (SchedulingDisabled) | Avoided
    jobs: list[str] = field(default_factory=list)
    drained_since: float | None = None
    avoided: list[dict[str, Json]] = field(default_factory=list)
    # What the node's NVIDIA container toolkit does with a container's own
    # NVIDIA_VISIBLE_DEVICES, as its agent last reported (flowcon.contract.TOOLKIT_STATES);
    # None: no agent reported it
    toolkit: str | None = None
    # what the node's engine applies to a job's container (Swarm: NodeHardening.state);
    # None: every hardening applies (the engine backend) or not known
    hardening: str | None = None

    def to_json(self) -> JsonObject:
        return {
            "name": self.name,
            "gpus": self.gpus,
            "used": self.used,
            "status": self.status,
            "jobs": list(self.jobs),
            "drained_since": self.drained_since,
            "avoided": list(self.avoided),
            "toolkit": self.toolkit,
            "hardening": self.hardening,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Json]) -> NodeView:
        since = data.get("drained_since")
        toolkit = data.get("toolkit")
        hardening = data.get("hardening")
        return cls(
            name=str(data.get("name", "")),
            gpus=int(data.get("gpus") or 0),
            used=int(data.get("used") or 0),
            status=str(data.get("status", "")),
            jobs=[str(j) for j in data.get("jobs") or []],
            drained_since=float(since) if isinstance(since, (int, float)) else None,
            avoided=[dict(a) for a in data.get("avoided") or [] if isinstance(a, Mapping)],
            toolkit=str(toolkit) if isinstance(toolkit, str) and toolkit else None,
            hardening=str(hardening) if isinstance(hardening, str) and hardening else None,
        )
