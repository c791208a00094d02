"""Every container-facing spec key reaches the container the allocator creates on the real
engine (volumes, shm_size, cpus/memory per GPU, workdir, user, labels, metric labels,
deadline_kind), both as the engine records it and as the job sees it from inside."""

from __future__ import annotations

import pytest
from support.allocator_daemon import CONFIG, containers, daemon_env, wait_for
from support.session import TEST_LABEL

from flowcon.client.http import AllocatorClient

pytestmark = pytest.mark.docker

GIB = 1 << 30
MIB = 1 << 20
REGEX = r"Step (?P<step>\d+) \| loss (?P<value>\S+)"
# what the job reports about its own container: the data file through the read-only bind,
# whether it can write there and to the named volume, its uid:gid, cwd and /dev/shm size
PROBE = r"""
echo "data=$(cat /data/hello.txt)"
touch /data/x 2>/dev/null && echo "data=writable" || echo "data=read-only"
echo ok > /cache/probe && echo "cache=writable"
echo "id=$(id -u):$(id -g) cwd=$(pwd)"
echo "shm=$(df -k /dev/shm | tail -1 | awk '{print $2}')k"
echo probed
sleep 600
"""


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    # the test's folder is the one host path its jobs may mount (executor.bind_roots)
    config = CONFIG + f"  bind_roots: [{tmp_path}]\n"
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, config=config)


def test_every_spec_key_reaches_the_container(env, docker_client, labeled, tmp_path) -> None:
    _cfg, start, rid = env
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "hello.txt").write_text("imagenet-ish\n")
    data.chmod(0o755)
    cache = f"cache-{rid}"
    docker_client.volumes.create(cache, labels=labeled())  # swept with the test's label
    # the named volume's root is writable by the job's uid
    docker_client.containers.run(
        "flowcon/testbox:latest",
        ["sh", "-c", "chown 1000:1000 /cache"],
        mounts=[{"Target": "/cache", "Source": cache, "Type": "volume"}],
        labels=labeled(),
        remove=True,
    )
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"k{rid}"
    out = client.submit(
        {
            "name": name,
            "image": "flowcon/testbox:latest",
            "command": ["sh", "-c", PROBE],
            "global_batch_size": 8,
            "iterations": 1000,
            "deadline": "10m",
            "deadline_kind": "soft",
            "min_gpus": 2,
            "max_gpus": 2,
            "profile": {1: 1.0, 2: 2.0},
            "volumes": [f"{data}:/data:ro", {"source": cache, "target": "/cache"}],
            "shm_size": "256m",
            "cpus_per_gpu": 0.25,
            "memory_per_gpu": "64m",
            "workdir": "/tmp",
            "user": "1000:1000",
            "labels": {"team": "vision", "example.com/cost-center": "42"},
            "metric": {"name": "loss", "regex": REGEX, "goal": "min"},
            "launcher": "flowcon",  # one container holding both GPUs: per-GPU limits x 2
        }
    )
    assert out["admitted"] is True, out
    (c,) = wait_for(lambda: containers(docker_client, rid, name), 30)
    wait_for(lambda: "probed" in c.logs().decode(), 30)
    c.reload()
    host = c.attrs["HostConfig"]
    mounts = {m["Target"]: m for m in host["Mounts"]}
    assert mounts["/data"] == {
        "Type": "bind",
        "Source": str(data),
        "Target": "/data",
        "ReadOnly": True,
    }
    assert mounts["/cache"]["Type"] == "volume"
    assert mounts["/cache"]["Source"] == cache
    assert not mounts["/cache"].get("ReadOnly")
    assert "/flowcon/checkpoint" in mounts  # the executor's own mount is still there
    assert host["ShmSize"] == 256 * MIB
    # what a job may reach (flowcon/executor/reach.py): no capability, no privilege gained
    # through setuid, a pids limit, its own IPC namespace, Docker's seccomp profile
    assert host["CapDrop"] == ["ALL"]
    assert not host.get("CapAdd")
    assert host["SecurityOpt"] == ["no-new-privileges"]
    assert host["PidsLimit"] == 4096
    assert host["IpcMode"] == "private"
    assert host["Privileged"] is False
    assert host["PidMode"] == ""
    assert host["NanoCpus"] == 500_000_000  # 0.25 CPU per GPU x 2 GPUs
    assert host["Memory"] == 128 * MIB  # 64m per GPU x 2 GPUs
    config = c.attrs["Config"]
    assert config["WorkingDir"] == "/tmp"
    assert config["User"] == "1000:1000"
    labels = config["Labels"]
    assert labels["team"] == "vision"
    assert labels["example.com/cost-center"] == "42"
    assert labels["flowcon.metric"] == "loss"
    assert labels["flowcon.metric.goal"] == "min"
    assert labels["flowcon.metric.regex"] == REGEX
    assert labels["flowcon.job"] == name
    assert labels[TEST_LABEL] == rid
    # ... and from inside the container
    logs = c.logs().decode()
    assert "data=imagenet-ish" in logs, logs
    assert "data=read-only" in logs, logs
    assert "cache=writable" in logs, logs
    assert "id=1000:1000 cwd=/tmp" in logs, logs
    assert f"shm={256 * 1024}k" in logs, logs
    # deadline_kind: soft reaches the job's record
    assert client.job(name)["soft_deadline"] is True
    client.cancel(name)
    wait_for(lambda: not containers(docker_client, rid, name), 30)


def test_a_refused_key_creates_nothing(env, docker_client) -> None:
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    from flowcon.client.http import ClientError

    with pytest.raises(ClientError) as err:
        client.submit(
            {
                "name": f"r{rid}",
                "image": "flowcon/testbox:latest",
                "command": "true",
                "global_batch_size": 8,
                "iterations": 10,
                "best_effort": True,
                "profile": {1: 1.0},
                "volumes": ["/var/run/docker.sock:/var/run/docker.sock"],
            }
        )
    assert "volumes[0].source" in str(err.value)
    assert "Docker socket" in str(err.value)
    assert not containers(docker_client, rid)
