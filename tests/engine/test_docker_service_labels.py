"""A Swarm task's labels: its service's (deploy.labels, from GET /services/{id}) under
its container's own, read once per service; an unreadable service (a worker node, a
removed service) leaves the container's labels, with one warning. Stub engine."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from support.stub_engine import ENGINE_29, StubEngine

from flowcon.agent.config import Config
from flowcon.agent.controller import Controller
from flowcon.agent.state_file import StateStore
from flowcon.core.labels import SERVICE_ID
from flowcon.engine.docker_engine import DockerEngine

TASK = "d" * 64


def test_service_labels_merged_and_cached(tmp_path: Path) -> None:
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        stub.services["svc1"] = {"flowcon.enable": "true", "flowcon.metric": "loss"}
        stub.add(TASK, "web.1.x", {SERVICE_ID: "svc1", "flowcon.metric": "accuracy"})
        stub.add("e" * 64, "plain", {"flowcon.metric": "loss"})
        eng = DockerEngine(stub.url, cgroup_root=None)
        for _ in range(3):
            labels = {c.name: c.labels for c in eng.list_running()}
            assert labels["web.1.x"] == {
                "flowcon.enable": "true",  # from the service
                "flowcon.metric": "accuracy",  # the container's own wins
                SERVICE_ID: "svc1",
            }
            assert labels["plain"] == {"flowcon.metric": "loss"}  # not a task: no lookup
        assert eng.inspect(TASK).labels["flowcon.enable"] == "true"
        assert [p for p in stub.paths if "/services/" in p] == ["/v1.45/services/svc1"]
        eng.close()


def test_unreadable_service_leaves_container_labels(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        stub.add(TASK, "web.1.x", {SERVICE_ID: "gone", "flowcon.metric": "loss"})
        eng = DockerEngine(stub.url, cgroup_root=None)
        with caplog.at_level(logging.WARNING, "flowcon.engine"):
            for _ in range(2):
                assert eng.list_running()[0].labels == {
                    SERVICE_ID: "gone",
                    "flowcon.metric": "loss",
                }
        warnings = [r.getMessage() for r in caplog.records if "swarm service" in r.getMessage()]
        assert len(warnings) == 1
        assert "not readable" in warnings[0]
        eng.close()


def test_agent_manages_a_task_opted_in_by_its_service(tmp_path: Path) -> None:
    with StubEngine(tmp_path / "e.sock", ENGINE_29) as stub:
        stub.services["svc1"] = {"flowcon.enable": "true", "flowcon.cpus.max": "1"}
        stub.add(TASK, "train.1.x", {SERVICE_ID: "svc1"})
        cfg = Config(
            itval=1, min_update_cpus=0, cpu_source="engine", state_file=str(tmp_path / "s.json")
        )
        eng = DockerEngine(stub.url, cgroup_root=None)
        ctl = Controller(eng, cfg, stub.ncpu, StateStore(cfg.state_file))
        ctl.resync("start")
        assert ctl.tracked[TASK].managed
        assert stub.updates
        assert stub.updates[-1][1]["NanoCpus"] <= 10**9  # flowcon.cpus.max
        eng.close()
