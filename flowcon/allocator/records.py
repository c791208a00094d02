"""Job records: a parsed ``JobSpec`` as the JSON the store and the executor keep, and back,
and a job's first record."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

from flowcon.allocator.store import JobRecord
from flowcon.jobspec.keys import MetricSpec, VolumeSpec
from flowcon.jobspec.spec import JobSpec, ThroughputProfile


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
        "volumes": [v.as_dict() for v in spec.volumes],
        "shm_size": spec.shm_size,
        "cpus": spec.cpus,
        "cpus_per_gpu": spec.cpus_per_gpu,
        "memory": spec.memory,
        "memory_per_gpu": spec.memory_per_gpu,
        "workdir": spec.workdir,
        "user": spec.user,
        "labels": dict(spec.labels),
        "soft_deadline": spec.soft_deadline,
        "metric": spec.metric.as_dict() if spec.metric is not None else None,
        "launcher": spec.launcher,
        "scaling": spec.scaling,
        "batch_size_min": spec.batch_size_min,
        "batch_size_max": spec.batch_size_max,
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
        volumes=tuple(
            VolumeSpec(str(v["source"]), str(v["target"]), bool(v.get("read_only", False)))
            for v in data.get("volumes") or ()
        ),
        shm_size=data.get("shm_size"),
        cpus=data.get("cpus"),
        cpus_per_gpu=data.get("cpus_per_gpu"),
        memory=data.get("memory"),
        memory_per_gpu=data.get("memory_per_gpu"),
        workdir=data.get("workdir"),
        user=data.get("user"),
        labels=dict(data.get("labels") or {}),
        soft_deadline=bool(data.get("soft_deadline", False)),
        metric=MetricSpec.from_dict(data["metric"]) if data.get("metric") else None,
        # a record from before the key ran its command as flowcon.elastic's main, once per
        # node: adopted jobs keep that layout
        launcher=str(data.get("launcher") or "flowcon"),
        scaling=str(data["scaling"]) if data.get("scaling") else None,
        batch_size_min=_int_or_none(data.get("batch_size_min")),
        batch_size_max=_int_or_none(data.get("batch_size_max")),
        master_port=int(data["master_port"]) if data.get("master_port") else None,
    )


def _int_or_none(value: Any) -> int | None:
    """An optional integer of a stored spec (absent in records from before the key)."""
    return None if value is None else int(value)


def job_metric(spec: Mapping[str, Any]) -> MetricSpec | None:
    """The ``metric`` of a stored spec (None when it has none, or is from before the key)."""
    raw = spec.get("metric")
    return MetricSpec.from_dict(raw) if isinstance(raw, Mapping) and raw else None


def new_record(spec: JobSpec, state: str, profile: dict[int, float], reason: str = "") -> JobRecord:
    """A job's first record: nothing done yet; hard or soft deadline (the spec's
    ``deadline_kind``), or best effort."""
    return JobRecord(
        name=spec.name,
        spec=spec_to_dict(spec),
        state=state,
        submit_time=spec.submit_time,
        deadline=spec.deadline,
        soft_deadline=spec.soft_deadline,
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
