"""The deployment files agree with the code: systemd units, the Swarm stack, the
Prometheus scrape config and the Grafana dashboard (every metric name they use is one the
exporters expose; the ports are the services' defaults)."""

from __future__ import annotations

import configparser
import json
import re
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

from flowcon.agent.config import Config
from flowcon.agent.exporter import Exporter
from flowcon.allocator.config import DEFAULT_PORT
from flowcon.allocator.metrics import AllocatorMetrics
from flowcon.allocator.store import Store

REPO = Path(__file__).resolve().parent.parent
AGENT_PORT = Config().metrics_port
# cAdvisor's series the dashboard joins with (not FlowCon's to expose)
CADVISOR = {"container_cpu_usage_seconds_total"}


def unit(name: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(strict=False, interpolation=None)
    cp.optionxform = str  # type: ignore[assignment,method-assign]
    cp.read_string((REPO / "deploy" / "systemd" / name).read_text())
    return cp


def test_systemd_units() -> None:
    for name, command in (
        ("flowcon-agent.service", "flowcon agent --config /etc/flowcon/flowcon.yaml"),
        ("flowcon-allocator.service", "flowcon allocator --config /etc/flowcon/allocator.yaml"),
    ):
        u = unit(name)
        assert "docker.service" in u["Unit"]["After"].split(), name
        assert u["Unit"]["Requires"] == "docker.service", name
        assert u["Service"]["Restart"] == "on-failure", name
        assert u["Service"]["ExecStart"].endswith(command), name
        assert u["Service"]["KillSignal"] == "SIGTERM", name
        assert u["Install"]["WantedBy"] == "multi-user.target", name
        text = (REPO / "deploy" / "systemd" / name).read_text()
        assert not re.search(r"(?i)token\s*=", text), "no token in a unit file"
    assert unit("flowcon-allocator.service")["Service"]["StateDirectory"] == "flowcon-allocator"


def exposed_names(tmp_path: Path) -> set[str]:
    """Family and sample names of both exporters."""
    exp = Exporter()
    exp.update([{"container_id": "a" * 64, "name": "x", "list": "NL", "g": 1.0}], 20.0)
    store = Store(tmp_path / "a.db")
    try:
        text = exp.render().decode() + AllocatorMetrics(store, 8).render().decode()
    finally:
        store.close()
    names = set()
    for fam in text_string_to_metric_families(text):
        names.add(fam.name)
        names.update(s.name for s in fam.samples)
        if fam.type == "counter":
            names.add(fam.name + "_total")
        if fam.type == "histogram":
            names.update(fam.name + s for s in ("_bucket", "_sum", "_count"))
    return names


def test_dashboard_uses_only_exposed_metrics(tmp_path: Path) -> None:
    dash = json.loads((REPO / "deploy" / "grafana" / "flowcon.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in dash["templating"]["list"] if v["type"] == "query"]
    used = {m for e in exprs for m in re.findall(r"\b((?:flowcon|container)_[a-z0-9_]+)", e)}
    exposed = exposed_names(tmp_path)
    assert used - exposed - CADVISOR == set()
    # both services are on the dashboard
    assert any(m.startswith("flowcon_container_") for m in used)
    assert any(m.startswith("flowcon_allocator_") for m in used)
    assert "flowcon_allocator_gpus_total" not in used  # the old gauge name


def test_prometheus_scrapes_the_services_ports() -> None:
    prom = yaml.safe_load((REPO / "deploy" / "prometheus" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    for job, service, port in (
        ("flowcon-agent", "_agent", AGENT_PORT),
        ("flowcon-allocator", "_allocator", DEFAULT_PORT),
    ):
        (sd,) = jobs[job]["dockerswarm_sd_configs"]
        assert sd["role"] == "tasks"
        assert sd["port"] == port
        relabels = jobs[job]["relabel_configs"]
        keep = [r for r in relabels if r.get("action") == "keep"]
        assert any(re.fullmatch(k["regex"], f"flowcon{service}") for k in keep)
        addr = [r for r in relabels if r.get("target_label") == "__address__"]
        assert addr
        assert addr[0]["replacement"] == f"$1:{port}"
    static = [t for c in jobs["flowcon-static"]["static_configs"] for t in c["targets"]]
    assert f"localhost:{AGENT_PORT}" in static
    assert f"localhost:{DEFAULT_PORT}" in static


def stack() -> dict[str, Any]:
    return dict(yaml.safe_load((REPO / "agent" / "stack.yml").read_text()))


def test_stack_agent_and_allocator() -> None:
    s = stack()
    agent, alloc = s["services"]["agent"], s["services"]["allocator"]
    assert agent["deploy"]["mode"] == "global"
    res = agent["deploy"]["resources"]
    assert res["limits"]["cpus"]
    assert res["reservations"]["cpus"]
    assert res["limits"]["memory"]
    mounts = {v["target"]: v for v in agent["volumes"] if isinstance(v, dict)}
    assert mounts["/var/run/docker.sock"]["type"] == "bind"
    assert mounts["/sys/fs/cgroup"]["read_only"] is True
    for svc, port in ((agent, AGENT_PORT), (alloc, DEFAULT_PORT)):
        test = svc["healthcheck"]["test"]
        assert test[:4] == ["CMD", "python3", "-m", "flowcon.web.probe"]
        assert test[4] == f"http://127.0.0.1:{port}/healthz"
    assert alloc["deploy"]["placement"]["constraints"] == ["node.role == manager"]
    assert any(str(v).startswith("allocator-data:") for v in alloc["volumes"])
    assert {c["target"] for c in alloc["configs"]} == {"/etc/flowcon/allocator.yaml"}
    # tokens are secrets (files under /run/secrets), never a config or the environment
    assert {x["target"] for x in alloc["secrets"]} == {
        "flowcon_agent_token",
        "flowcon_user_token",
        "flowcon_read_token",
    }
    assert "environment" not in alloc
    # the agents' environment names where to report, never a token
    assert set(agent["environment"]) == {"FLOWCON_ALLOCATOR_URL"}
    alloc_cfg = yaml.safe_load((REPO / "agent" / "allocator.yaml").read_text())
    assert "token" not in alloc_cfg["allocator"]
    assert alloc_cfg["allocator"]["listen"].endswith(f":{DEFAULT_PORT}")
    assert set(s["volumes"]) == {"agent-state", "allocator-data"}


def test_dockerfile_healthcheck_and_port() -> None:
    text = (REPO / "agent" / "Dockerfile").read_text()
    assert f"EXPOSE {AGENT_PORT}" in text
    assert re.search(
        rf'HEALTHCHECK .*\n?.*"flowcon\.web\.probe", "http://127\.0\.0\.1:{AGENT_PORT}/healthz"',
        text,
    )
    flowcon_yaml = yaml.safe_load((REPO / "agent" / "flowcon.yaml").read_text())
    assert flowcon_yaml["metrics_port"] == AGENT_PORT == 9464
