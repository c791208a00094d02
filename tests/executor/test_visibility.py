"""The executor's NVIDIA variables and reserved-label blanks, and both backends' create
arguments carrying them (pure: a stand-in docker-py client records the calls)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from flowcon.executor.backend import ExecutorError, WorkerRequest
from flowcon.executor.backends.engine import EngineBackend
from flowcon.executor.backends.swarm import SwarmBackend
from flowcon.executor.visibility import (
    AGENT_LABELS,
    container_labels,
    gpu_env,
    job_env,
    reserved_blanks,
)

CUDA_IMAGE_LABELS = {
    "flowcon.enable": "true",
    "flowcon.cpus.min": "9999",
    "flowcon.elastic": "stopfree",
    "flowcon.job": "someone-else",
    "org.opencontainers.image.title": "cuda",
}


def test_gpu_env_names_exactly_the_job_gpus_or_void() -> None:
    assert gpu_env(("GPU-a", "GPU-b")) == {
        "NVIDIA_VISIBLE_DEVICES": "GPU-a,GPU-b",
        "NVIDIA_DRIVER_CAPABILITIES": "compute,utility",
    }
    assert gpu_env(())["NVIDIA_VISIBLE_DEVICES"] == "void"


@pytest.mark.parametrize("bad", ["all", "ALL", "none", "void", "", "GPU-a,GPU-b", "GPU a"])
def test_gpu_env_refuses_an_id_that_widens_the_list(bad: str) -> None:
    with pytest.raises(ValueError, match="NVIDIA_VISIBLE_DEVICES"):
        gpu_env(("GPU-x", bad))


def test_job_env_overrides_what_the_spec_env_said() -> None:
    env = job_env({"NVIDIA_VISIBLE_DEVICES": "all", "A": "1"}, ("FAKE-node1-0",))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "FAKE-node1-0"
    assert env["A"] == "1"


def test_reserved_blanks_cover_every_image_flowcon_key_flowcon_does_not_set() -> None:
    own = {"flowcon.job": "j1", "flowcon.managed-by": "flowcon-allocator", "flowcon.metric": "l"}
    blanks = reserved_blanks(CUDA_IMAGE_LABELS, own)
    assert set(blanks.values()) == {""}
    assert {"flowcon.enable", "flowcon.cpus.min", "flowcon.elastic"} <= set(blanks)
    assert not set(own) & set(blanks)  # FlowCon's own labels stay
    merged = container_labels(CUDA_IMAGE_LABELS, own)
    assert merged["flowcon.job"] == "j1"
    assert merged["flowcon.enable"] == ""
    assert "org.opencontainers.image.title" not in merged  # Docker merges that one itself


def test_agent_labels_are_blanked_when_the_image_cannot_be_read() -> None:
    """A Swarm node pulls an image the manager never saw: the labels an agent acts on are
    blanked all the same."""
    blanks = reserved_blanks({}, {"flowcon.job": "j1"})
    assert set(blanks) == set(AGENT_LABELS)
    assert set(blanks.values()) == {""}
    assert "flowcon.enable" in blanks
    assert "flowcon.gpu.share" in blanks


# ---------------------------------------------------------------- the backends' create


class _Images:
    def get(self, image: str) -> Any:
        return SimpleNamespace(attrs={"Config": {"Labels": dict(CUDA_IMAGE_LABELS)}})


class _Containers:
    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def create(self, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        attrs = {"Config": {"Labels": kwargs["labels"], "Image": kwargs["image"]}, "State": {}}
        return SimpleNamespace(
            id="c1",
            name=kwargs["name"],
            attrs=attrs,
            labels=kwargs["labels"],
            start=lambda: None,
            reload=lambda: None,
        )


class _Services:
    def __init__(self) -> None:
        self.kwargs: dict[str, Any] = {}

    def create(self, image: str, **kwargs: Any) -> Any:
        self.kwargs = kwargs
        attrs = {"ID": "s1", "Spec": {"Name": kwargs["name"], "Labels": kwargs["labels"]}}
        return SimpleNamespace(id="s1", name=kwargs["name"], attrs=attrs, reload=lambda: None)


def _client() -> Any:
    """An engine (API 1.46: no-new-privileges on services) with the image."""
    return SimpleNamespace(
        images=_Images(),
        containers=_Containers(),
        services=_Services(),
        nodes=SimpleNamespace(list=lambda **_k: [], get=lambda _id: None),
        version=lambda: {"ApiVersion": "1.46"},
        info=lambda: {},
    )


def _request(gpus: tuple[str, ...], real: bool, env: dict[str, str] | None = None) -> Any:
    return WorkerRequest(
        name="flowcon-j1--node1",
        job="j1",
        node="node1",
        image="cuda-like",
        command=("true",),
        env=env or {"NVIDIA_VISIBLE_DEVICES": "all"},
        labels={"flowcon.job": "j1", "flowcon.managed-by": "flowcon-allocator"},
        gpus=gpus,
        real_gpus=real,
        checkpoint_volume="flowcon-ckpt-j1",
        checkpoint_host_dir="/tmp/ckpt/j1",
        grace_s=1.0,
        network=None,
    )


@pytest.fixture(autouse=True)
def _users_as_given(monkeypatch: pytest.MonkeyPatch) -> None:
    """Whom the container runs as is another check's (flowcon/executor/node_fs.py): these
    stand-in clients hold no image to resolve a user in."""
    from flowcon.executor.backends import engine, swarm

    for module in (engine, swarm):
        monkeypatch.setattr(module, "resolve_user", lambda *a, **_k: a[3], raising=False)


def _env_of_service(kwargs: dict[str, Any]) -> dict[str, str]:
    return dict(item.split("=", 1) for item in kwargs["env"])


@pytest.mark.parametrize("real", [False, True])
def test_engine_create_sets_the_job_gpus_over_the_spec_and_image(real: bool) -> None:
    client = _client()
    EngineBackend(client).create(_request(("FAKE-node1-0", "FAKE-node1-1"), real))
    kw = client.containers.kwargs
    assert kw["environment"]["NVIDIA_VISIBLE_DEVICES"] == "FAKE-node1-0,FAKE-node1-1"
    assert kw["environment"]["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    assert kw["labels"]["flowcon.enable"] == ""
    assert kw["labels"]["flowcon.cpus.min"] == ""
    assert kw["labels"]["flowcon.elastic"] == ""
    assert kw["labels"]["flowcon.job"] == "j1"
    # the device request stays for GPUs NVML reported, and only for those
    requests = kw.get("device_requests") or []
    assert [list(r["DeviceIDs"]) for r in requests] == (
        [["FAKE-node1-0", "FAKE-node1-1"]] if real else []
    )


def test_engine_create_gives_a_worker_without_gpus_void() -> None:
    client = _client()
    EngineBackend(client).create(_request((), False))
    assert client.containers.kwargs["environment"]["NVIDIA_VISIBLE_DEVICES"] == "void"


def test_engine_create_refuses_a_keyword_as_gpu_id() -> None:
    with pytest.raises(ExecutorError, match="GPU id 'all'"):
        EngineBackend(_client()).create(_request(("all",), False))


@pytest.mark.parametrize("real", [False, True])
def test_swarm_create_sets_the_job_gpus_over_the_spec_and_image(real: bool) -> None:
    client = _client()
    backend = SwarmBackend(client, node_clients={"node1": client})
    backend.create(_request(("GPU-a",), real))
    kw = client.services.kwargs
    env = _env_of_service(kw)
    assert env["NVIDIA_VISIBLE_DEVICES"] == "GPU-a"
    assert env["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"
    for key in ("labels", "container_labels"):
        assert kw[key]["flowcon.enable"] == ""
        assert kw[key]["flowcon.cpus.min"] == ""
        assert kw[key]["flowcon.job"] == "j1"


def test_swarm_create_gives_a_worker_without_gpus_void() -> None:
    client = _client()
    backend = SwarmBackend(client, node_clients={"node1": client})
    backend.create(_request((), False))
    assert _env_of_service(client.services.kwargs)["NVIDIA_VISIBLE_DEVICES"] == "void"
