"""flowcon/agent/exporter.py: the exposition's names, types and labels (Prometheus conventions,
cAdvisor-joinable container labels)."""

from __future__ import annotations

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from flowcon.agent.counters import AgentCounters
from flowcon.agent.exporter import Exporter

FULL_ID = "f" * 64


def families(exp: Exporter) -> dict[str, Metric]:
    return {f.name: f for f in text_string_to_metric_families(exp.render().decode())}


def view(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {
        "container_id": FULL_ID,
        "name": "train-a",
        "job": "resnet",
        "list": "NL",
        "cpus": 1.5,
        "limit": 0.75,
        "g": 0.9,
        "cpu_share": 0.5,
    }
    base.update(kw)
    return base


# name -> Prometheus type; counters are exposed with _total
EXPECTED = {
    "flowcon_container_cpu_limit_cpus": "gauge",
    "flowcon_container_cpu_shares": "gauge",
    "flowcon_container_cpuset_cores": "gauge",
    "flowcon_container_limit_ratio": "gauge",
    "flowcon_container_growth_efficiency": "gauge",
    "flowcon_container_cpu_usage_ratio": "gauge",
    "flowcon_container_gpu_usage_ratio": "gauge",
    "flowcon_container_gpu_utilization_ratio": "gauge",
    "flowcon_container_gpu_memory_used_bytes": "gauge",
    "flowcon_container_gpu_processes": "gauge",
    "flowcon_agent_rounds": "counter",
    "flowcon_agent_itval_seconds": "gauge",
    "flowcon_agent_last_round_timestamp_seconds": "gauge",
    "flowcon_agent_containers": "gauge",
    "flowcon_agent_engine_errors": "counter",
    "flowcon_agent_cpu_updates": "counter",
    "flowcon_agent_foreign_changes": "counter",
    "flowcon_agent_label_errors": "counter",
    "flowcon_build_info": "gauge",
}


def test_names_types_and_conventions() -> None:
    exp = Exporter()
    exp.update([view()], 20.0, now=1700000000.0)
    fams = families(exp)
    assert {n: f.type for n, f in fams.items()} == EXPECTED
    text = exp.render().decode()
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            # no _total on gauges; counters are exposed with it
            assert name.endswith("_total") == (kind == "counter"), line
    assert "flowcon_agent_last_round_timestamp_seconds 1.7e+09" in text


def test_container_labels_join_with_cadvisor() -> None:
    exp = Exporter()
    exp.update([view()], 20.0)
    fams = families(exp)
    (sample,) = fams["flowcon_container_cpu_limit_cpus"].samples
    assert sample.labels == {
        "id": f"/docker/{FULL_ID}",
        "name": "train-a",
        "job": "resnet",
        "list": "NL",
    }
    assert sample.value == 1.5
    ratio = fams["flowcon_container_cpu_usage_ratio"].samples[0]
    assert ratio.value == 0.5


def test_applied_weights_and_cpuset_are_exported() -> None:
    exp = Exporter()
    exp.update([view(shares=1536, cpuset="0-2,5"), view(container_id="e" * 64, name="q")], 20.0)
    fams = families(exp)
    shares = {s.labels["name"]: s.value for s in fams["flowcon_container_cpu_shares"].samples}
    cores = {s.labels["name"]: s.value for s in fams["flowcon_container_cpuset_cores"].samples}
    assert shares == {"train-a": 1536, "q": 0}
    assert cores == {"train-a": 4, "q": 0}


def test_list_change_replaces_the_series_and_counts_per_list() -> None:
    exp = Exporter()
    exp.update([view(), view(container_id="e" * 64, name="b", list="CL")], 20.0)
    exp.update([view(list="WL"), view(container_id="e" * 64, name="b", list="CL")], 20.0)
    fams = families(exp)
    lists = {s.labels["list"] for s in fams["flowcon_container_limit_ratio"].samples}
    assert lists == {"WL", "CL"}  # the NL series of train-a is gone
    counts = {s.labels["list"]: s.value for s in fams["flowcon_agent_containers"].samples}
    assert counts == {"NL": 0, "WL": 1, "CL": 1, "none": 0}
    exp.update([view(container_id="d" * 64, name="watched", list=None, cpus=None, g=None)], 20.0)
    fams = families(exp)
    (s,) = fams["flowcon_container_cpu_limit_cpus"].samples
    assert s.labels["list"] == "none"
    assert s.value == 0.0
    assert fams["flowcon_container_growth_efficiency"].samples == []


def test_error_and_update_counters_and_build_info() -> None:
    counters = AgentCounters()
    exp = Exporter(counters)
    counters.engine_error("list")
    counters.engine_error("list")
    counters.engine_error("update")
    counters.cpu_update()
    fams = families(exp)
    errors = {
        s.labels["operation"]: s.value
        for s in fams["flowcon_agent_engine_errors"].samples
        if s.name.endswith("_total")
    }
    assert errors == {"list": 2, "measure": 0, "update": 1, "restore": 0}
    (upd,) = [s for s in fams["flowcon_agent_cpu_updates"].samples if s.name.endswith("_total")]
    assert upd.value == 1
    (info,) = fams["flowcon_build_info"].samples
    assert info.value == 1
    assert info.labels["component"] == "agent"
    assert info.labels["version"]
    assert info.labels["python"].startswith("3.")
