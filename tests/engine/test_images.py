"""Training images: each script trains a few steps and prints valid metric lines;
the image build is cached."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowcon.engine import images as img

REPO = Path(__file__).resolve().parents[2]
TRAIN = REPO / "images" / "train"
# The scripts import this checkout's flowcon.report, whatever is installed.
PYTHONPATH = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
MODELS = {
    "vae": "vae.py",
    "mnist": "mnist.py",
    "mnist-mlp": "mnist_mlp.py",
    "lstm": "lstm.py",
    "birnn": "birnn.py",
    "gru": "gru.py",
}


def metric_lines(stdout: str) -> list[dict[str, object]]:
    rows = []
    for line in stdout.splitlines():
        data = json.loads(line)  # every stdout line must be a metric line
        assert isinstance(data, dict)
        rows.append(data)
    return rows


def check_lines(rows: list[dict[str, object]], steps: int) -> None:
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        loss = r["loss"]
        assert isinstance(loss, float | int)
        assert math.isfinite(loss)
        assert loss >= 0
        assert isinstance(r["ts"], float | int)


def test_every_model_has_a_dockerfile() -> None:
    assert sorted(t.model for t in img.training_images()) == sorted(MODELS)
    for t in img.training_images():
        text = t.dockerfile.read_text()
        assert "ARG BASE_IMAGE=flowcon/base:bookworm" in text
        assert MODELS[t.model] in text


@pytest.mark.parametrize("model", sorted(MODELS))
def test_training_script_runs_a_few_steps_on_host(model: str) -> None:
    pytest.importorskip("torch")
    env = dict(
        os.environ,
        FLOWCON_ITERATIONS="3",
        FLOWCON_SAMPLES="64",
        FLOWCON_THREADS="1",
        FLOWCON_BATCH="8",
        PYTHONPATH=PYTHONPATH,
    )
    proc = subprocess.run(
        [sys.executable, str(TRAIN / MODELS[model])],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    check_lines(metric_lines(proc.stdout), 3)
    assert "done in" in proc.stderr


def test_bad_iterations_env_is_a_clear_error() -> None:
    pytest.importorskip("torch")
    env = dict(os.environ, FLOWCON_ITERATIONS="many", PYTHONPATH=PYTHONPATH)
    proc = subprocess.run(
        [sys.executable, str(TRAIN / "gru.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode != 0
    assert "FLOWCON_ITERATIONS='many': expected an integer" in proc.stderr


def test_context_digest_is_deterministic() -> None:
    t = img.training_images()[0]
    files = img._context_files(t)
    assert img.context_digest(files, "sha256:a") == img.context_digest(files, "sha256:a")
    assert img.context_digest(files, "sha256:a") != img.context_digest(files, "sha256:b")
    names = [n for n, _ in files]
    assert "flowcon/report.py" in names
    assert "Dockerfile" in names
    assert img.context_tar(files).getvalue() == img.context_tar(files).getvalue()
    assert img.model_of("flowcon/train-vae:latest") == "vae"
    assert img.model_of("flowcon/testbox:latest") is None


def test_default_iterations_match_scripts() -> None:
    import re

    for model, script in MODELS.items():
        text = (TRAIN / script).read_text()
        found = re.findall(r"default_iterations=(\d+)", text)
        assert found == [str(img.DEFAULT_ITERATIONS[model])], (model, found)


def _run_gru(**env: str) -> subprocess.CompletedProcess[str]:
    base = {
        k: v for k, v in os.environ.items() if k not in ("FLOWCON_THREADS", "FLOWCON_ADAPT_THREADS")
    }
    base.update(FLOWCON_ITERATIONS="3", FLOWCON_SEQ_LEN="10", PYTHONPATH=PYTHONPATH, **env)
    return subprocess.run(
        [sys.executable, str(TRAIN / "gru.py")],
        env=base,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("env", "adapting"),
    [
        ({}, True),
        ({"FLOWCON_ADAPT_THREADS": "0"}, False),
        ({"FLOWCON_THREADS": "1"}, False),  # an override pins the pool...
        ({"FLOWCON_THREADS": "1", "FLOWCON_ADAPT_THREADS": "1"}, True),  # ...unless asked
    ],
)
def test_training_lines_carry_threads_only_while_adapting(
    env: dict[str, str], adapting: bool
) -> None:
    pytest.importorskip("torch")
    proc = _run_gru(**env)
    assert proc.returncode == 0, proc.stderr
    rows = metric_lines(proc.stdout)
    check_lines(rows, 3)
    if adapting:
        assert "(adapting to the CPU limit)" in proc.stderr
        assert all(isinstance(r["threads"], int) and r["threads"] >= 1 for r in rows)
    else:
        assert "(fixed)" in proc.stderr
        assert all("threads" not in r for r in rows)


def test_bad_adapt_env_is_named_and_the_job_runs() -> None:
    pytest.importorskip("torch")
    proc = _run_gru(FLOWCON_ADAPT_THREADS="perhaps")
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count("FLOWCON_ADAPT_THREADS='perhaps'") == 1
    assert all("threads" in r for r in metric_lines(proc.stdout))
