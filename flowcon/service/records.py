"""Job records: a parsed ``JobSpec`` as the JSON the store and the executor keep, and back,
and a job's first record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from flowcon.service.jobspec import JobSpec, ThroughputProfile
from flowcon.service.store import JobRecord


def spec_to_dict(spec: JobSpec) -> dict[str, Any]:
    """The parsed spec as JSON (deadline already absolute), for the store and the executor."""
    return {
        "name": spec.name,
        "image": spec.image,
        "command": list(spec.command),
        "global_batch_size": spec.global_batch_size,
        "iterations": spec.iterations,
        "submit_time": spec.submit_time,
        "deadline": spec.deadline,
        "best_effort": spec.best_effort,
        "min_gpus": spec.min_gpus,
        "max_gpus": spec.max_gpus,
        "profile": {str(g): v for g, v in spec.profile.points} if spec.profile else None,
        "env": dict(spec.env),
        "launcher": spec.launcher,
        "master_port": spec.master_port,
    }


def spec_from_dict(data: Mapping[str, Any]) -> JobSpec:
    profile = data.get("profile")
    return JobSpec(
        name=data["name"],
        image=data["image"],
        command=tuple(data["command"]),
        global_batch_size=int(data["global_batch_size"]),
        iterations=int(data["iterations"]),
        submit_time=float(data["submit_time"]),
        deadline=data.get("deadline"),
        best_effort=bool(data.get("best_effort", False)),
        min_gpus=int(data.get("min_gpus", 1)),
        max_gpus=data.get("max_gpus"),
        profile=ThroughputProfile.from_mapping({int(k): v for k, v in profile.items()})
        if profile
        else None,
        env=dict(data.get("env") or {}),
        # a record from before the key ran its command as flowcon.elastic's main, once per
        # node: adopted jobs keep that layout
        launcher=str(data.get("launcher") or "flowcon"),
        master_port=int(data["master_port"]) if data.get("master_port") else None,
    )


def new_record(spec: JobSpec, state: str, profile: dict[int, float], reason: str = "") -> JobRecord:
    """A job's first record: nothing done yet; hard or soft deadline, or best effort, from its
    spec (``soft_deadline`` is read when the spec carries it, else the deadline is hard)."""
    return JobRecord(
        name=spec.name,
        spec=spec_to_dict(spec),
        state=state,
        submit_time=spec.submit_time,
        deadline=spec.deadline,
        soft_deadline=bool(getattr(spec, "soft_deadline", False)),
        iterations=float(spec.iterations),
        done_iterations=0.0,
        progress_ts=None,
        profile=profile,
        reason=reason,
    )


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (dataclasses as dicts, sets as lists)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return jsonable(asdict(value))
    return str(value)
