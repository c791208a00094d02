"""flowcon/allocator/metrics.py: the allocator's exposition (names, types, labels) read back
with prometheus_client's parser."""

from __future__ import annotations

from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from flowcon.allocator.metrics import AllocatorMetrics
from flowcon.allocator.store import Store

EXPECTED = {
    "flowcon_allocator_jobs": "gauge",
    "flowcon_allocator_gpus": "gauge",
    "flowcon_allocator_gpus_allocated": "gauge",
    "flowcon_allocator_job_gpus": "gauge",
    "flowcon_allocator_job_progress_ratio": "gauge",
    "flowcon_allocator_job_measured_iterations_per_second": "gauge",
    "flowcon_allocator_job_deadline_timestamp_seconds": "gauge",
    "flowcon_allocator_job_predicted_finish_timestamp_seconds": "gauge",
    "flowcon_allocator_deadline_satisfactory_ratio": "gauge",
    "flowcon_allocator_admissions": "counter",
    "flowcon_allocator_measurements": "counter",
    "flowcon_allocator_round_seconds": "histogram",
    "flowcon_allocator_round_errors": "counter",
    "flowcon_allocator_workers_left": "counter",
    "flowcon_allocator_refused_calls": "counter",
    "flowcon_build_info": "gauge",
}


def test_names_types_and_no_total_on_gauges(tmp_path: Path) -> None:
    store = Store(tmp_path / "a.db")
    try:
        m = AllocatorMetrics(store, 8)
        m.admission(True)
        m.admission(False)
        m.measurement("refined")
        m.observe_round(0.01)
        m.round_error()
        m.worker_left("straggler")
        text = m.render().decode()
    finally:
        store.close()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    assert {n: f.type for n, f in fams.items()} == EXPECTED
    for line in text.splitlines():
        if line.startswith("# TYPE"):
            _, _, name, kind = line.split()
            assert name.endswith("_total") == (kind == "counter"), line
    assert "flowcon_allocator_gpus 8.0" in text
    assert 'flowcon_allocator_admissions_total{decision="dropped"} 1.0' in text
    assert "flowcon_allocator_round_errors_total 1.0" in text
    assert 'flowcon_allocator_workers_left_total{reason="straggler"} 1.0' in text
    (info,) = fams["flowcon_build_info"].samples
    assert info.labels["component"] == "allocator"
    assert info.value == 1
