"""A job whose image says ``ENV NVIDIA_VISIBLE_DEVICES=all`` (as every CUDA base image does)
run by the executor on a declared inventory: each container's environment names exactly its
own GPUs (the real engine; flowcon/executor/visibility.py)."""

from __future__ import annotations

import io

import pytest

from flowcon.executor.lifecycle import Executor

pytest.register_assert_rewrite("support.swarm_fixtures")
from support.session import TESTBOX_IMAGE  # noqa: E402
from support.swarm_fixtures import step_job_spec  # noqa: E402

pytest_plugins = ("support.swarm_fixtures",)
pytestmark = pytest.mark.docker


@pytest.fixture
def cuda_like_image(docker_client, labeled, test_run_id):
    """testbox with the NVIDIA variables of a CUDA base image, labelled for the test."""
    tag = f"flowcon/test-cuda-like:{test_run_id}"
    dockerfile = (
        f"FROM {TESTBOX_IMAGE}\nENV NVIDIA_VISIBLE_DEVICES=all NVIDIA_DRIVER_CAPABILITIES=all\n"
    )
    docker_client.images.build(fileobj=io.BytesIO(dockerfile.encode()), tag=tag, labels=labeled())
    yield tag
    docker_client.images.remove(tag, force=True)


def _env(container) -> dict[str, str]:
    return dict(e.split("=", 1) for e in container.attrs["Config"]["Env"])


def test_each_container_sees_exactly_its_gpus_never_all(
    executor: Executor, docker_client, cuda_like_image
) -> None:
    image_env = docker_client.images.get(cuda_like_image).attrs["Config"]["Env"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in image_env  # what the job's image says
    spec = step_job_spec("gpuvis", image=cuda_like_image)
    workers = executor.launch(spec, {"node1": ["0", "2"], "node2": ["FAKE-node2-3"]})
    envs = [_env(docker_client.containers.get(w.id)) for w in workers]
    assert [e["NVIDIA_VISIBLE_DEVICES"] for e in envs] == [
        "FAKE-node1-0,FAKE-node1-2",
        "FAKE-node2-3",
    ]
    assert {e["NVIDIA_DRIVER_CAPABILITIES"] for e in envs} == {"compute,utility"}
    # what the process inside sees, not only what the engine recorded
    c0 = docker_client.containers.get(workers[0].id)
    out = c0.exec_run(["sh", "-c", "echo $NVIDIA_VISIBLE_DEVICES"])[1].decode().strip()
    assert out == "FAKE-node1-0,FAKE-node1-2"
