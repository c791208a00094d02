"""An unchanged script that prints its own format (``Epoch 3 | Step 120 | loss 0.41``, no
FlowCon JSON) is measured by the allocator through the spec's ``metric.regex``: the pre-run
finds its steps/s (the job's recorded profile) and its progress is observed from its lines
(the record's ``observed_ts`` and ``done_iterations``), for each way of counting steps: a
step group, epochs times ``steps_per_epoch``, counted lines times ``steps_per_line``.
Without the regex, the same script gives the allocator nothing to measure."""

from __future__ import annotations

import time
from typing import Any

import pytest
from support.allocator_daemon import daemon_env, engine_config, wait_for

from flowcon.client.http import AllocatorClient

pytestmark = pytest.mark.docker

SPEED = 20.0  # steps/s the script really runs at
SPE = 10  # its steps per epoch
PER_LINE = 5  # steps per line in the "lines" format

# Runs at RATE milli-steps/s of wall time (as flowcon.testing.ratejob, so fork overhead on a
# busy machine does not slow it) and prints only its own format, on stdout or stderr.
OWN_FORMAT = r"""
d=${FLOWCON_CHECKPOINT_DIR:-/tmp}; s=0; e=0; l=0
now_ms() { t=$EPOCHREALTIME; us=${t#*.}; echo $(( ${t%.*} * 1000 + (1$us - 1000000) / 1000 )); }
echo "training for $FLOWCON_ITERATIONS steps"
t0=$(now_ms)
while [ "$s" -lt "$FLOWCON_ITERATIONS" ]; do
  sleep 0.2 & wait $!
  s=$(( ($(now_ms) - t0) * RATE / 1000000 ))
  case "$FORMAT" in
    step) echo "Epoch $((s / SPE)) | Step $s | loss 0.$((9999 - s))" ;;
    epoch) while [ $(( (e + 1) * SPE )) -le "$s" ]; do e=$((e + 1));
             echo "Epoch $e done, loss 0.$((9999 - s))" >&2; done ;;
    lines) while [ $(( l + PER_LINE )) -le "$s" ]; do l=$((l + PER_LINE));
             echo "loss=0.$((9999 - l))"; done ;;
  esac
done
"""

METRICS: dict[str, dict[str, Any]] = {
    "step": {"regex": r"Epoch \d+ \| Step (?P<step>\d+) \| loss (?P<value>[0-9.]+)"},
    "epoch": {
        "regex": r"Epoch (?P<epoch>\d+) done, loss (?P<value>[0-9.]+)",
        "steps_per_epoch": SPE,
    },
    "lines": {"regex": r"^loss=(?P<value>[0-9.]+)$", "steps_per_line": PER_LINE},
}

CONFIG = engine_config(profile_seconds=12, profile_min_lines=6)


@pytest.fixture
def env(tmp_path, docker_client, labeled, test_run_id):
    yield from daemon_env(tmp_path, docker_client, labeled, test_run_id, CONFIG)


def own_spec(name: str, fmt: str, metric: dict[str, Any] | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "name": name,
        "image": "flowcon/testbox:latest",
        "command": ["sh", "-c", OWN_FORMAT],
        "global_batch_size": 8,
        "iterations": 4000,
        "deadline": "1h",
        "max_gpus": 1,
        "profile": "auto",
        "env": {"RATE": int(SPEED * 1000), "FORMAT": fmt, "SPE": SPE, "PER_LINE": PER_LINE},
    }
    if metric is not None:
        spec["metric"] = {"name": "loss", "goal": "min", **metric}
    return spec


@pytest.mark.parametrize("fmt", ["step", "epoch", "lines"])
def test_own_format_is_measured_through_metric_regex(env, fmt: str) -> None:
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"o{fmt[0]}{rid}"
    out = client.submit(own_spec(name, fmt, METRICS[fmt]))
    assert out["decision"] == "profiling", out
    job = wait_for(lambda: (j := client.job(name))["state"] == "running" and j, 60)
    # steps/s from the pre-run, read from the script's own lines
    assert job["profile"]["1"] == pytest.approx(SPEED, rel=0.25), job["profile"]
    # progress observed from its lines (not only the allocator's estimate)
    t0 = time.time()
    rec = wait_for(
        lambda: (
            (r := alloc.store.get_job(name)).observed_ts is not None
            and r.observed_ts > t0
            and r.done_iterations >= 2 * SPE
            and r
        ),
        40,
    )
    assert rec.done_iterations < rec.iterations
    # the observed step is the script's own, within a couple of lines of real time
    elapsed = rec.observed_ts - min(e.ts for e in alloc.store.events(job=name, kind="started"))
    assert rec.done_iterations == pytest.approx(SPEED * elapsed, abs=3 * SPE + SPEED * 2)
    client.cancel(name)


def test_without_the_regex_nothing_is_measured(env) -> None:
    _cfg, start, rid = env
    alloc = start()
    client = AllocatorClient(alloc.url, alloc.token)
    name = f"on{rid}"
    client.submit(own_spec(name, "step", None))
    job = wait_for(lambda: (j := client.job(name))["state"] != "profiling" and j, 60)
    assert job["state"] == "dropped"
    assert "no GPU count produced metric lines" in job["reason"]
