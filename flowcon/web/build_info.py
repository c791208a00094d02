"""``flowcon_build_info``: the usual constant-1 gauge naming the version that runs."""

from __future__ import annotations

import platform

from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics

import flowcon


def register_build_info(registry: CollectorRegistry, component: str) -> Gauge:
    """Also turns off prometheus_client's ``*_created`` series (process-wide): they double
    every counter's series and nothing here reads them."""
    disable_created_metrics()  # type: ignore[no-untyped-call]  # untyped in prometheus_client
    info = Gauge(
        "flowcon_build_info",
        "FlowCon version and Python version of this process (always 1)",
        ["version", "python", "component"],
        registry=registry,
    )
    info.labels(flowcon.__version__, platform.python_version(), component).set(1)
    return info
