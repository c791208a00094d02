#!/usr/bin/env bash
# Install FlowCon and its Python dependencies into the current Python.
# torch is pinned to the CPU build first so that the `elastic` extra does not pull
# several GB of CUDA wheels on a CPU-only host.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PIP_ROOT_USER_ACTION=ignore
# pip warns about every local index folder it does not find; keep real errors only.
quiet() { grep -v -e "^WARNING: Location" -e "Running pip as the .root. user" || true; }
if ! "$PY" -c "import torch" >/dev/null 2>&1; then
    "$PY" -m pip install -q "torch==${FLOWCON_TORCH_VERSION:-2.13.0}" 2> >(quiet >&2) \
        || echo "[install] torch not installed: flowcon.elastic tests will be skipped" >&2
fi
"$PY" -m pip install -q --disable-pip-version-check -e '.[dev,elastic]' 2> >(quiet >&2)
"$PY" -c "import flowcon, docker, apscheduler, yaml, psutil" \
    || { echo "[install] FlowCon did not install" >&2; exit 1; }
