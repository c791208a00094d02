"""Container labels and metric-line parsing: good values, bad values, garbage."""

from __future__ import annotations

import pytest

from flowcon.core.labels import (
    LabelError,
    compile_metric_regex,
    merge_service_labels,
    parse_bool,
    parse_policy,
)
from flowcon.core.metric_lines import LineKind, parse_line


def test_opt_in_only() -> None:
    assert parse_policy({}) is None
    assert parse_policy({"flowcon.enable": "false"}) is None
    p = parse_policy({"flowcon.enable": "True"})
    assert p is not None
    assert p.managed
    assert p.metric == "loss"
    assert p.goal == "min"


# Go's strconv.ParseBool, as Traefik reads its labels: exactly these spellings.
PARSE_BOOL = [
    *[(raw, True) for raw in ("1", "t", "T", "TRUE", "true", "True")],
    *[(raw, False) for raw in ("0", "f", "F", "FALSE", "false", "False")],
]
NOT_BOOL = ["yes", "no", "on", "off", "y", "tRUE", "fALSE", " true", "true ", "", "2", "-1", "1.0"]


@pytest.mark.parametrize(("raw", "value"), PARSE_BOOL)
def test_enable_reads_go_parse_bool(raw: str, value: bool) -> None:
    assert parse_bool("flowcon.enable", raw) is value
    policy = parse_policy({"flowcon.enable": raw})
    assert (policy is not None and policy.managed) is value


@pytest.mark.parametrize("raw", NOT_BOOL)
def test_enable_refuses_anything_else(raw: str) -> None:
    with pytest.raises(LabelError, match=f"flowcon.enable={raw!r} is not a boolean"):
        parse_policy({"flowcon.enable": raw})


def test_service_labels_under_container_labels() -> None:
    service = {"flowcon.enable": "true", "flowcon.metric": "loss", "flowcon.cpus.max": "2"}
    container = {"flowcon.metric": "accuracy", "com.docker.swarm.service.id": "s1"}
    merged = merge_service_labels(container, service)
    assert merged == {**service, **container}
    assert merged["flowcon.metric"] == "accuracy"  # the container's wins
    assert merge_service_labels(container, {}) == container


def test_job_label_is_monitor_only() -> None:
    p = parse_policy({"flowcon.job": "resnet-7"})
    assert p is not None
    assert not p.managed
    assert p.monitored
    assert p.job == "resnet-7"


def test_full_labels() -> None:
    p = parse_policy(
        {
            "flowcon.enable": "true",
            "flowcon.metric": "accuracy",
            "flowcon.metric.goal": "max",
            "flowcon.metric.regex": r"acc=(?P<value>[0-9.]+)",
            "flowcon.cpus.min": "0.5",
            "flowcon.cpus.max": "2",
        }
    )
    assert p is not None
    assert p.goal == "max"
    assert p.cpus_min == 0.5
    assert p.cpus_max == 2.0
    assert p.regex is not None


@pytest.mark.parametrize(
    "labels",
    [
        {"flowcon.enable": "yes please"},
        {"flowcon.enable": "true", "flowcon.metric.goal": "down"},
        {"flowcon.enable": "true", "flowcon.metric.regex": "loss=([0-9"},
        {"flowcon.enable": "true", "flowcon.metric.regex": r"loss=([0-9.]+)"},  # no (?P<value>)
        {"flowcon.enable": "true", "flowcon.cpus.min": "lots"},
        {"flowcon.enable": "true", "flowcon.cpus.max": "nan"},
        {"flowcon.enable": "true", "flowcon.cpus.max": "-1"},
        {"flowcon.enable": "true", "flowcon.cpus.min": "2", "flowcon.cpus.max": "1"},
        {"flowcon.enable": "true", "flowcon.threads": "yes"},
        {"flowcon.enable": "true", "flowcon.gpu.share": "yes"},
    ],
)
def test_bad_labels(labels: dict[str, str]) -> None:
    with pytest.raises(LabelError):
        parse_policy(labels)


def test_gpu_share_label_opts_in_as_enable_does() -> None:
    on = {"flowcon.enable": "true"}
    plain, shared = parse_policy(on), parse_policy({**on, "flowcon.gpu.share": "1"})
    assert plain is not None
    assert shared is not None
    assert (plain.gpu_share, shared.gpu_share) == (False, True)


def test_threads_label_overrides_what_the_lines_say() -> None:
    on = {"flowcon.enable": "true"}
    plain = parse_policy(on)
    adaptive = parse_policy({**on, "flowcon.threads": "adaptive"})
    fixed = parse_policy({**on, "flowcon.threads": " fixed "})
    assert plain is not None
    assert adaptive is not None
    assert fixed is not None
    assert (plain.thread_aware(False), plain.thread_aware(True)) == (False, True)
    assert (adaptive.thread_aware(False), adaptive.thread_aware(True)) == (True, True)
    assert (fixed.thread_aware(False), fixed.thread_aware(True)) == (False, False)
    with pytest.raises(LabelError, match=r"flowcon.threads='yes'"):
        parse_policy({**on, "flowcon.threads": "yes"})


def test_metric_lines() -> None:
    ok = parse_line('{"step": 12, "loss": 0.5, "ts": 1.0}', "loss")
    assert ok.kind is LineKind.SAMPLE
    assert ok.value == 0.5
    assert ok.step == 12
    assert parse_line("Epoch 1/10 [=====>....]", "loss").kind is LineKind.TEXT
    assert parse_line('{"step": 12, "loss": 0.5', "loss").kind is LineKind.MALFORMED
    assert parse_line("[1, 2]", "loss").kind is LineKind.TEXT
    assert parse_line("{[1, 2]}", "loss").kind is LineKind.MALFORMED
    assert parse_line('{"step": 3, "acc": 0.1}', "loss").kind is LineKind.NO_METRIC
    assert parse_line('{"step": 3, "acc": 0.1}', "loss").step == 3
    assert parse_line('{"loss": NaN}', "loss").kind is LineKind.NON_FINITE
    assert parse_line('{"loss": Infinity}', "loss").kind is LineKind.NON_FINITE
    assert parse_line('{"loss": null}', "loss").kind is LineKind.NON_FINITE
    assert parse_line('{"loss": "0.25"}', "loss").value == 0.25
    assert parse_line('{"loss": "low"}', "loss").kind is LineKind.BAD_VALUE
    assert parse_line('{"loss": true}', "loss").kind is LineKind.BAD_VALUE
    assert parse_line("{" * 100_000, "loss").kind is LineKind.MALFORMED  # deep nesting


def test_regex_label_lines() -> None:
    rx = compile_metric_regex(r"iter (?P<step>\d+) loss=(?P<value>\S+)")
    s = parse_line("2024 INFO iter 40 loss=1.25e-1", "loss", rx)
    assert s.kind is LineKind.SAMPLE
    assert s.value == 0.125
    assert s.step == 40
    assert parse_line("iter 41 loss=nan", "loss", rx).kind is LineKind.NON_FINITE
    assert parse_line("iter 42 loss=oops", "loss", rx).kind is LineKind.BAD_VALUE
    assert parse_line('{"loss": 1}', "loss", rx).kind is LineKind.TEXT  # regex only
