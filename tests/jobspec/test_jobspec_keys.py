"""The container-facing spec keys: each parses, and each bad value is refused with an
error naming the field and what is allowed."""

from __future__ import annotations

from typing import Any

import pytest

from flowcon.jobspec.keys import (
    DEFAULT_SHM,
    GIB,
    MIB,
    MetricSpec,
    VolumeSpec,
    default_shm,
    parse_size,
)
from flowcon.jobspec.spec import JobSpec, JobSpecError, parse_jobspec

BASE: dict[str, Any] = {
    "name": "j",
    "image": "flowcon/testbox:latest",
    "command": "true",
    "global_batch_size": 8,
    "iterations": 100,
    "deadline": 60,
    "profile": {1: 1.0},
}


def spec(**extra: Any) -> JobSpec:
    return parse_jobspec({**BASE, **extra}, now=0.0)


def refused(field: str, **extra: Any) -> str:
    with pytest.raises(JobSpecError) as err:
        spec(**extra)
    assert err.value.field == field, str(err.value)
    return str(err.value)


def test_defaults_change_nothing() -> None:
    s = spec()
    assert s.volumes == ()
    assert s.shm_size is None
    assert s.labels == {}
    assert (s.cpus, s.cpus_per_gpu, s.memory, s.memory_per_gpu) == (None, None, None, None)
    assert (s.workdir, s.user, s.metric, s.soft_deadline) == (None, None, None, False)


@pytest.mark.parametrize(
    ("text", "size"),
    [
        (1024, 1024),
        ("512m", 512 * MIB),
        ("1g", GIB),
        ("1G", GIB),
        ("1.5g", GIB * 3 // 2),
        ("2Gi", 2 * GIB),
        ("256MB", 256 * MIB),
        ("64k", 64 * 1024),
        ("100", 100),
    ],
)
def test_sizes(text: Any, size: int) -> None:
    assert parse_size(text, "memory") == size


@pytest.mark.parametrize("bad", ["", "1x", "-1g", "g", "1 g b", True, None, 0, [1], 1.5])
def test_bad_sizes_name_the_field(bad: Any) -> None:
    with pytest.raises(ValueError, match=r"^shm_size: .*a (positive )?size"):
        parse_size(bad, "shm_size")


def test_volumes_short_and_long_forms() -> None:
    s = spec(
        volumes=[
            "/srv/datasets/imagenet:/data:ro",
            "/srv/out:/out",
            "cache:/cache:rw",
            {"source": "/srv/code", "target": "/code/", "read_only": True},
        ]
    )
    assert s.volumes == (
        VolumeSpec("/srv/datasets/imagenet", "/data", True),
        VolumeSpec("/srv/out", "/out", False),
        VolumeSpec("cache", "/cache", False),
        VolumeSpec("/srv/code", "/code", True),
    )
    assert [v.kind for v in s.volumes] == ["bind", "bind", "volume", "bind"]


@pytest.mark.parametrize(
    ("volumes", "field", "says"),
    [
        ("/a:/b", "volumes", "a list"),
        (["/a"], "volumes[0]", "SOURCE:TARGET"),
        (["/a:/b:rx"], "volumes[0]", "SOURCE:TARGET"),
        (["/:/host"], "volumes[0].source", "other than /"),
        (["/var/run/docker.sock:/var/run/docker.sock"], "volumes[0].source", "Docker socket"),
        (["/run/docker.sock:/s"], "volumes[0].source", "Docker socket"),
        (["/srv/../etc:/etc2"], "volumes[0].source", "'..'"),
        (["/srv/$HOME:/d"], "volumes[0].source", "shell characters"),
        (["bad name:/d"], "volumes[0].source", "named volume"),
        (["flowcon-ckpt-x:/d"], "volumes[0].source", "'flowcon-' namespace"),
        (["/srv:data"], "volumes[0].target", "absolute"),
        (["/srv:/"], "volumes[0].target", "other than /"),
        (["/srv:/dev/shm"], "volumes[0].target", "/dev/shm"),
        (["/srv:/proc/x"], "volumes[0].target", "/proc"),
        (["/srv:/flowcon"], "volumes[0].target", "/flowcon/checkpoint"),
        (["/srv:/flowcon/checkpoint"], "volumes[0].target", "/flowcon/checkpoint"),
        (["/a:/d", "/b:/d/"], "volumes[1].target", "no other volume"),
        ([{"source": "/a"}], "volumes[0].target", "a string"),
        ([{"source": "/a", "target": "/b", "read_only": "yes"}], "volumes[0].read_only", "true"),
        ([{"source": "/a", "target": "/b", "mode": "ro"}], "volumes[0].mode", "unknown field"),
        ([3], "volumes[0]", "SOURCE:TARGET"),
    ],
)
def test_bad_volumes(volumes: Any, field: str, says: str) -> None:
    assert says in refused(field, volumes=volumes)


def test_resources_per_worker_and_per_gpu() -> None:
    s = spec(cpus=4, memory="16g", shm_size="2g")
    assert (s.cpus, s.memory, s.shm_size) == (4.0, 16 * GIB, 2 * GIB)
    s = spec(cpus_per_gpu=2.5, memory_per_gpu="8g")
    assert (s.cpus_per_gpu, s.memory_per_gpu) == (2.5, 8 * GIB)


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"cpus": 0}, "cpus", ">= 0.01"),
        ({"cpus": "4"}, "cpus", "number of CPUs"),
        ({"cpus": True}, "cpus", "number of CPUs"),
        ({"cpus": float("inf")}, "cpus", "number of CPUs"),
        ({"cpus": 2, "cpus_per_gpu": 1}, "cpus_per_gpu", "not both"),
        ({"memory": "1g", "memory_per_gpu": "1g"}, "memory_per_gpu", "not both"),
        ({"memory": "1m"}, "memory", "at least 6m"),
        ({"memory_per_gpu": "lots"}, "memory_per_gpu", "size"),
        ({"shm_size": "1k"}, "shm_size", "at least 1m"),
        ({"shm_size": "big"}, "shm_size", "size"),
    ],
)
def test_bad_resources(extra: dict[str, Any], field: str, says: str) -> None:
    assert says in refused(field, **extra)


def test_shm_default_is_1g_at_most_half_the_memory() -> None:
    assert default_shm(None) == DEFAULT_SHM == GIB
    assert default_shm(16 * GIB) == GIB
    assert default_shm(1 * GIB) == GIB // 2
    assert default_shm(6 * MIB) == 3 * MIB


def test_workdir_user_labels() -> None:
    s = spec(workdir="/work/src", user="1000:1000", labels={"team": "vision", "a/b": "1"})
    assert (s.workdir, s.user, dict(s.labels)) == (
        "/work/src",
        "1000:1000",
        {"team": "vision", "a/b": "1"},
    )
    assert spec(user="ubuntu").user == "ubuntu"
    assert spec(user=1000).user == "1000"
    assert spec(user="app:staff").user == "app:staff"
    assert spec(user="john.doe").user == "john.doe"


@pytest.mark.parametrize(
    ("extra", "field", "says"),
    [
        ({"workdir": "src"}, "workdir", "absolute"),
        ({"workdir": "/a/../b"}, "workdir", "'..'"),
        ({"workdir": 3}, "workdir", "absolute"),
        ({"user": "root; rm"}, "user", "uid[:gid]"),
        ({"user": "1000:"}, "user", "uid[:gid]"),
        ({"user": -1}, "user", "uid[:gid]"),
        ({"labels": ["a"]}, "labels", "mapping"),
        ({"labels": {"flowcon.job": "x"}}, "labels.flowcon.job", "outside 'flowcon.'"),
        ({"labels": {"flowcon.enable": "true"}}, "labels.flowcon.enable", "outside"),
        ({"labels": {"com.docker.swarm.x": "y"}}, "labels.com.docker.swarm.x", "outside"),
        ({"labels": {"team": 3}}, "labels.team", "a string"),
        ({"labels": {"team": "a\nb"}}, "labels.team", "control characters"),
        ({"labels": {"bad key!": "v"}}, "labels.bad key!", "label key"),
        ({"deadline_kind": "firm"}, "deadline_kind", "hard or soft"),
        ({"deadline_kind": True}, "deadline_kind", "hard or soft"),
    ],
)
def test_bad_workdir_user_labels_deadline_kind(
    extra: dict[str, Any], field: str, says: str
) -> None:
    assert says in refused(field, **extra)


def test_soft_deadline_needs_a_deadline() -> None:
    assert spec(deadline_kind="soft").soft_deadline is True
    base = {k: v for k, v in BASE.items() if k != "deadline"}
    with pytest.raises(JobSpecError) as err:
        parse_jobspec({**base, "best_effort": True, "deadline_kind": "soft"}, now=0.0)
    assert err.value.field == "deadline_kind"


REGEX = r"Epoch (?P<epoch>\d+) \| Step (?P<step>\d+) \| loss (?P<value>[0-9.eE+-]+)"


def test_metric_forms() -> None:
    m = spec(metric={"name": "loss", "regex": REGEX, "goal": "min"}).metric
    assert m == MetricSpec("loss", REGEX, "min")
    assert m is not None
    assert m.compiled() is not None
    lines = spec(metric={"regex": r"loss=(?P<value>\S+)", "steps_per_line": 10}).metric
    assert lines == MetricSpec("loss", r"loss=(?P<value>\S+)", "min", 10.0, None)
    epochs = spec(
        metric={
            "regex": r"epoch (?P<epoch>\d+) acc (?P<value>\S+)",
            "goal": "max",
            "steps_per_epoch": 500,
            "name": "acc",
        }
    ).metric
    assert epochs is not None
    assert (epochs.goal, epochs.steps_per_epoch) == ("max", 500)
    assert spec(metric={"name": "acc", "goal": "max"}).metric == MetricSpec("acc", None, "max")


@pytest.mark.parametrize(
    ("metric", "field", "says"),
    [
        ("loss", "metric", "a mapping"),
        ({"regex": "loss (\\S+)"}, "metric.regex", "(?P<value>...)"),
        ({"regex": "loss (?P<value>"}, "metric.regex", "does not compile"),
        ({"regex": 5}, "metric.regex", "regular expression"),
        ({"goal": "lower"}, "metric.goal", "min or max"),
        ({"name": ""}, "metric.name", "non-empty"),
        ({"pattern": "x"}, "metric.pattern", "unknown field"),
        ({"steps_per_line": 2}, "metric.regex", "required"),
        ({"regex": r"(?P<value>\d)", "steps_per_line": 0}, "metric.steps_per_line", "positive"),
        ({"regex": r"(?P<value>\d)", "steps_per_epoch": 1.5}, "metric.steps_per_epoch", ">= 1"),
        ({"regex": r"(?P<value>\d)", "steps_per_epoch": 10}, "metric.regex", "(?P<epoch>"),
        ({"regex": r"e(?P<epoch>\d) (?P<value>\d)"}, "metric.steps_per_epoch", "required"),
        ({"regex": REGEX, "steps_per_line": 2}, "metric.steps_per_line", "(?P<step>"),
        (
            {"regex": r"e(?P<epoch>\d) (?P<value>\d)", "steps_per_epoch": 5, "steps_per_line": 2},
            "metric.steps_per_line",
            "steps_per_epoch",
        ),
    ],
)
def test_bad_metric(metric: Any, field: str, says: str) -> None:
    assert says in refused(field, metric=metric)
