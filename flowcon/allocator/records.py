"""Job records: a parsed ``JobSpec`` as the JSON the store keeps, and back (the store's
boundary: everywhere else a record's spec is the typed ``JobSpec``), and the one conversion
of a spec to the policy's ``flowcon.alloc.model.Job``."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from flowcon.alloc.batch import best_batch, live_range, model_batch, speed_at
from flowcon.alloc.model import BatchRange, Job, ThroughputCurve
from flowcon.jobspec.keys import MetricSpec, VolumeSpec
from flowcon.jobspec.spec import JobSpec, JobSpecError, ThroughputProfile

REDACTED = "***"
# JSON as parsed (json.loads): a stored spec, the open parts of an answer (a spec shown as
# stored, an event's own fields); whoever reads a value checks or converts it
Json = Any
JsonObject = dict[str, Json]


def spec_to_dict(spec: JobSpec) -> dict[str, object]:
    """The parsed spec as JSON (deadline already absolute), as the store keeps it."""
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
        "batch_profile": {
            str(b): {str(k): v for k, v in sorted(row.items())}
            for b, row in sorted(spec.batch_profile.items())
        },
        "max_local_batch": spec.max_local_batch,
        "master_port": spec.master_port,
        "rendezvous_secret": spec.rendezvous_secret,
        "owner": spec.owner,
    }


def spec_from_dict(data: Mapping[str, Json]) -> JobSpec:
    """A stored spec back (``data`` is the store's JSON, of this version or an older one:
    keys added since have their defaults)."""
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
        batch_profile={
            int(b): {int(k): float(v) for k, v in row.items()}
            for b, row in (data.get("batch_profile") or {}).items()
        },
        max_local_batch=_int_or_none(data.get("max_local_batch")),
        master_port=int(data["master_port"]) if data.get("master_port") else None,
        rendezvous_secret=str(data["rendezvous_secret"]) if data.get("rendezvous_secret") else None,
        owner=str(data["owner"]) if data.get("owner") else None,
    )


def _int_or_none(value: Json) -> int | None:
    """An optional integer of a stored spec (absent in records from before the key)."""
    return None if value is None else int(value)


def spec_json(spec: JobSpec, redact: bool = False) -> JsonObject:
    """The spec as the store writes it (keys sorted) and the API shows it; ``redact``:
    ``env`` names kept, values replaced by "***" (they may hold credentials; only the
    containers get them)."""
    out: JsonObject = json.loads(json.dumps(spec_to_dict(spec), sort_keys=True, default=str))
    if redact and out["env"]:
        out["env"] = {str(k): REDACTED for k in out["env"]}
    if redact:
        out.pop("rendezvous_secret", None)  # the job's own: only its containers get it
    return out


def core_job(
    spec: JobSpec, curve: ThroughputCurve | None = None, done_iterations: float = 0.0
) -> Job:
    """The policy's ``Job`` for ``spec``: its curve is ``curve`` (the planner's, measured
    points over the profile) or the spec's profile. ``model`` is the job's image: jobs of one
    image train one model, and the model keys the per-model throughput tables and caps (the
    simulator fills it from a trace's ``model_name``)."""
    brange = batch_range_of(spec, curve)  # before: the profile's curve has no measurement
    if curve is None:
        if spec.profile is None:
            raise JobSpecError("profile", "no throughput profile yet (run the pre-run first)")
        points = spec.profile.as_dict()
        curve = ThroughputCurve(points, frozenset(points))
    return Job(
        job_id=spec.name,
        submit_time=spec.submit_time,
        iterations=float(spec.iterations),
        deadline=spec.deadline,
        soft_deadline=spec.soft_deadline,
        curve=curve,
        min_gpus=spec.min_gpus,
        max_gpus=spec.max_gpus,
        requested_gpus=spec.min_gpus,
        done_iterations=done_iterations,
        model=spec.image,
        batch_size=spec.global_batch_size,
        batch_range=brange,
    )


def batch_range_of(spec: JobSpec, curve: ThroughputCurve | None = None) -> BatchRange | None:
    """The core's ``BatchRange`` of a job whose spec has a batch range (None otherwise):
    ``flowcon.alloc.batch.live_range`` over ``curve`` (the planner's: the profile corrected
    by measurements, in iterations of the submitted batch per second; the spec's profile
    when None), the batches the pre-run measured and the largest local batch it found.
    ``flowcon.alloc.batch.best_batch`` of it is the batch the job runs at on k GPUs, for
    the policy and for the executor alike; which batch that is depends on the profile and
    the pre-run only, the closed loop's measurements in ``curve`` only move its speed."""
    rng = spec.batch_range
    if rng is None or spec.profile is None:
        return None
    base = ThroughputCurve(spec.profile.as_dict())
    if curve is None:
        curve = base
    return live_range(
        curve,
        spec.global_batch_size,
        spec.min_gpus,
        rng[0],
        rng[1],
        spec.batch_profile,
        spec.max_local_batch,
        (spec.max_gpus,) if spec.max_gpus else (),
        base,
    )


def run_batch(spec: JobSpec, gpus: int, curve: ThroughputCurve | None = None) -> int | None:
    """The global batch ``spec`` runs at on ``gpus`` GPUs: ``best_batch`` of
    ``batch_range_of(spec, curve)``, the batch the policy plans with; None for a job
    without a batch range. Where no cell of the range is feasible at ``gpus`` (more GPUs
    than the range's cells reach, or no profile yet) the weak-scaling batch
    ``model_batch``, the rule the range's own cells follow (``Executor.rescale`` refuses
    one that does not split)."""
    rng = spec.batch_range
    if rng is None or gpus < 1:
        return None
    brange = batch_range_of(spec, curve)
    if brange is None or not any(brange.feasible(b, gpus) for b in brange.batches):
        return model_batch(
            spec.global_batch_size, spec.min_gpus, rng[0], rng[1], gpus, spec.max_local_batch
        )
    return best_batch(brange, gpus)


def planned_speed(spec: JobSpec, curve: ThroughputCurve, gpus: int) -> float:
    """The job's speed on ``gpus`` GPUs in iterations of the submitted batch per second
    (samples/s over ``global_batch_size``), at the batch it runs at there: ``curve.at``
    for a fixed batch, ``flowcon.alloc.batch.speed_at`` of its range otherwise."""
    brange = batch_range_of(spec, curve)
    return curve.at(gpus) if brange is None else speed_at(brange, gpus)
