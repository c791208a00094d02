"""Every container-facing spec key reaches the Swarm service the executor creates (and
its task's container): mounts, /dev/shm as a sized tmpfs, CPU and memory limits scaled per
GPU, workdir, user, labels with the agent's metric labels."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from flowcon.executor.lifecycle import Executor
from flowcon.executor.reach import Reach

pytest.register_assert_rewrite("support.swarm_fixtures")  # it is also loaded as a plugin below
from support.session import TESTBOX_IMAGE  # noqa: E402
from support.swarm_fixtures import swarm_executor_for  # noqa: E402
from support.waiting import wait_for  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = [pytest.mark.swarm, pytest.mark.docker]

GIB = 1 << 30
MIB = 1 << 20
REGEX = r"Step (?P<step>\d+) \| loss (?P<value>\S+)"


@pytest.fixture
def swarm_executor(swarm, labeled, tmp_path: Path):
    ex = swarm_executor_for(swarm, labeled(), str(tmp_path / "ckpt"), 2.0)
    yield ex
    for name in list(ex.jobs()):
        ex.remove(name, grace_s=1.0)


def test_every_spec_key_reaches_the_service(swarm, swarm_executor, tmp_path, test_run_id) -> None:
    from flowcon.jobspec.spec import parse_jobspec

    ex: Executor = swarm_executor
    data = tmp_path / "dataset"
    data.mkdir()
    (data / "hello.txt").write_text("imagenet-ish\n")
    data.chmod(0o755)
    name = f"swk{test_run_id}"
    spec = parse_jobspec(
        {
            "name": name,
            "image": TESTBOX_IMAGE,
            "command": ["sh", "-c", "cat /data/hello.txt; df -k /dev/shm | tail -1; sleep 600"],
            "global_batch_size": 8,
            "iterations": 100,
            "best_effort": True,
            "profile": {1: 1.0, 2: 2.0},
            "volumes": [f"{data}:/data:ro"],
            "shm_size": "256m",
            "cpus_per_gpu": 0.25,
            "memory_per_gpu": "64m",
            "workdir": "/tmp",
            "user": "1000:1000",
            "labels": {"team": "vision"},
            "metric": {"name": "loss", "regex": REGEX, "goal": "min"},
            "launcher": "flowcon",  # one service holding both GPUs: per-GPU limits x 2
        }
    )
    # the test's folder is the one host path its jobs may mount (executor.bind_roots)
    ex.options = replace(ex.options, reach=Reach(bind_roots=(str(tmp_path),)))
    (w,) = ex.launch(spec, {"node1": ["0", "1"]})
    svc = swarm.manager.services.get(w.id)
    task = svc.attrs["Spec"]["TaskTemplate"]
    cspec = task["ContainerSpec"]
    mounts = {m["Target"]: m for m in cspec["Mounts"]}
    assert mounts["/data"]["Type"] == "bind"
    assert mounts["/data"]["Source"] == str(data)
    assert mounts["/data"]["ReadOnly"] is True
    assert mounts["/dev/shm"]["Type"] == "tmpfs"
    assert mounts["/dev/shm"]["TmpfsOptions"]["SizeBytes"] == 256 * MIB
    assert "/flowcon/checkpoint" in mounts
    assert task["Resources"]["Limits"] == {
        "NanoCPUs": 500_000_000,
        "MemoryBytes": 128 * MIB,
        "Pids": 4096,
    }
    assert cspec["CapabilityDrop"] == ["ALL"]  # the same limits as on the engine backend
    assert cspec["Dir"] == "/tmp"
    assert cspec["User"] == "1000:1000"
    for labels in (svc.attrs["Spec"]["Labels"], cspec["Labels"]):
        assert labels["team"] == "vision"
        assert labels["flowcon.metric.regex"] == REGEX
        assert labels["flowcon.job"] == name
    # the task's container got them too, and the job sees its data and its /dev/shm size
    c = wait_for(
        lambda: swarm.manager.containers.list(
            ignore_removed=True, filters={"label": f"flowcon.job={name}"}
        ),
        60,
    )[0]
    wait_for(lambda: "imagenet-ish" in c.logs().decode(), 30)
    assert str(256 * 1024) in c.logs().decode()
    assert c.attrs["HostConfig"]["NanoCpus"] == 500_000_000
    assert c.attrs["HostConfig"]["Memory"] == 128 * MIB
    assert c.attrs["HostConfig"]["CapDrop"] == ["ALL"]
    assert c.attrs["HostConfig"]["PidsLimit"] == 4096
    assert c.attrs["Config"]["User"] == "1000:1000"
    assert c.attrs["Config"]["WorkingDir"] == "/tmp"
