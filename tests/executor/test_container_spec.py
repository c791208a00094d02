"""The spec's container settings as engine and Swarm create arguments (pure)."""

from __future__ import annotations

from typing import Any

from flowcon.executor.container_spec import (
    ContainerSettings,
    engine_kwargs,
    settings_for,
    swarm_kwargs,
)
from flowcon.jobspec.keys import GIB
from flowcon.jobspec.spec import JobSpec, parse_jobspec

BASE: dict[str, Any] = {
    "name": "j",
    "image": "flowcon/testbox:latest",
    "command": "true",
    "global_batch_size": 8,
    "iterations": 100,
    "deadline": 60,
    "profile": {1: 1.0},
}
REGEX = r"Step (?P<step>\d+) \| loss (?P<value>\S+)"


def spec(**extra: Any) -> JobSpec:
    return parse_jobspec({**BASE, **extra}, now=0.0)


FULL = spec(
    volumes=["/srv/data:/data:ro", "cache:/cache"],
    shm_size="2g",
    cpus=3,
    memory="12g",
    workdir="/work",
    user="1000:1000",
    labels={"team": "vision"},
    metric={"name": "loss", "regex": REGEX, "goal": "min"},
)


# what every container gets whatever its spec (flowcon/executor/reach.py)
HARDENED = {
    "cap_drop": ["ALL"],
    "security_opt": ["no-new-privileges"],
    "pids_limit": 4096,
    "ipc_mode": "private",
}


def test_engine_kwargs_carry_every_key() -> None:
    kw = engine_kwargs(settings_for(FULL, gpus=2))
    assert kw == {
        "mounts": [
            {"Target": "/data", "Source": "/srv/data", "Type": "bind", "ReadOnly": True},
            {"Target": "/cache", "Source": "cache", "Type": "volume", "ReadOnly": False},
        ],
        "shm_size": 2 * GIB,
        **HARDENED,
        "nano_cpus": 3_000_000_000,
        "mem_limit": 12 * GIB,
        "working_dir": "/work",
        "user": "1000:1000",
    }


def test_labels_are_the_specs_and_the_agents_metric_labels() -> None:
    assert dict(settings_for(FULL, 1).labels) == {
        "team": "vision",
        "flowcon.metric": "loss",
        "flowcon.metric.goal": "min",
        "flowcon.metric.regex": REGEX,
    }
    assert dict(settings_for(spec(), 1).labels) == {}


def test_per_gpu_values_scale_with_the_workers_gpus() -> None:
    s = spec(cpus_per_gpu=2.5, memory_per_gpu="4g")
    one, three = settings_for(s, 1), settings_for(s, 3)
    assert (one.nano_cpus, one.memory) == (2_500_000_000, 4 * GIB)
    assert (three.nano_cpus, three.memory) == (7_500_000_000, 12 * GIB)
    # the default shm follows the worker's memory: 1 GiB, at most half of it
    assert one.shm_size == 1 * GIB
    assert three.shm_size == GIB
    small = settings_for(spec(memory_per_gpu="512m"), 1)
    assert small.shm_size == 256 * 1024 * 1024


def test_no_keys_gives_the_default_shm_and_no_limits() -> None:
    kw = engine_kwargs(settings_for(spec(), 4))
    # no user in the spec: the operator's default, nobody (not the image's root)
    assert kw == {"mounts": [], "shm_size": GIB, **HARDENED, "user": "65534:65534"}
    assert engine_kwargs(ContainerSettings(user="65534:65534")) == kw


def test_swarm_kwargs_carry_every_key() -> None:
    kw = swarm_kwargs(settings_for(FULL, gpus=2))
    assert kw == {
        "mounts": [
            {"Target": "/data", "Source": "/srv/data", "Type": "bind", "ReadOnly": True},
            {"Target": "/cache", "Source": "cache", "Type": "volume", "ReadOnly": False},
            {"Target": "/dev/shm", "Type": "tmpfs", "TmpfsOptions": {"SizeBytes": 2 * GIB}},
        ],
        "cap_drop": ["ALL"],
        "resources": {"Limits": {"NanoCPUs": 3_000_000_000, "MemoryBytes": 12 * GIB, "Pids": 4096}},
        "workdir": "/work",
        "user": "1000:1000",
    }
    bare = swarm_kwargs(settings_for(spec(), 1))
    assert bare["resources"] == {"Limits": {"Pids": 4096}}
    assert "workdir" not in bare
    assert bare["user"] == "65534:65534"  # the operator's default, nobody
