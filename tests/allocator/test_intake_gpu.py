"""The intake keeps the GPU utilisation an agent sends with a container's throughput."""

from __future__ import annotations

from pathlib import Path

from flowcon.allocator.intake import MeasurementIntake
from flowcon.allocator.store import Store


def test_gpu_utilisation_arrives_with_the_throughput(tmp_path: Path) -> None:
    st = Store(tmp_path / "a.db")
    try:
        intake = MeasurementIntake(st)
        intake.set_containers("a", {"c1": 1, "c2": 1})
        assert intake.gpu_utilization("a") is None
        base = {"job": "a", "iterations_per_second": 5.0, "name": "x"}
        intake.ingest("n", {**base, "container_id": "c1", "ts": 1.0, "gpu_utilization": 0.5})  # type: ignore[typeddict-item]
        intake.ingest("n", {**base, "container_id": "c2", "ts": 1.0, "gpu_utilization": 0.25})  # type: ignore[typeddict-item]
        assert intake.gpu_utilization("a") == 0.375
        # an older report does not replace a newer one; a bad or absent figure is ignored
        intake.ingest("n", {**base, "container_id": "c1", "ts": 0.5, "gpu_utilization": 0.9})  # type: ignore[typeddict-item]
        intake.ingest("n", {**base, "container_id": "c1", "ts": 2.0, "gpu_utilization": "x"})  # type: ignore[typeddict-item]
        intake.ingest("n", {**base, "container_id": "c1", "ts": 3.0})  # type: ignore[typeddict-item]
        assert intake.gpu_utilization("a") == 0.375
        intake.forget_job("a")
        assert intake.gpu_utilization("a") is None
    finally:
        st.close()
