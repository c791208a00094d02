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
# Chromium for the live views' browser tests (pytest -m browser); FLOWCON_NO_CHROMIUM=1
# skips it (those tests then skip, saying why).
if [ "${FLOWCON_NO_CHROMIUM:-}" != 1 ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        echo "[install] installing chromium (browser tests; FLOWCON_NO_CHROMIUM=1 skips)" >&2
        apt_chromium() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                chromium >/dev/null 2>&1
        }
        apt_chromium || { apt-get update -q >/dev/null 2>&1 && apt_chromium; } \
            || echo "[install] chromium not installed: browser tests will skip" >&2
    else
        echo "[install] no chromium (needs root and apt-get): browser tests will skip" >&2
    fi
fi
