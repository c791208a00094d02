#!/usr/bin/env bash
# Install FlowCon for development and CI into the project virtualenv .venv, from the lock
# file requirements/dev.lock: exactly the locked versions, whatever the machine already has.
#
#   1. python3 -m venv .venv (once; PYTHON picks another interpreter, 3.11 or newer);
#   2. uv, at the version pinned below, into .venv with pip;
#   3. uv pip sync of requirements/dev.lock plus FlowCon itself, editable: adds, upgrades
#      and removes until .venv holds that and nothing else (a second run changes nothing
#      and takes about a second).
#
# torch is locked to its CPU build (torch==2.13.0+cpu), read from the wheel folder
# FLOWCON_WHEELS (default /opt/wheels), so that the `elastic` extra does not pull several GB
# of CUDA wheels. Where that wheel is absent torch is left out, saying so, and the
# flowcon.elastic tests skip. `make lock` updates the lock (see the Makefile).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
VENV=.venv
UV_VERSION=0.13.9
LOCK=requirements/dev.lock
WHEELS="${FLOWCON_WHEELS:-/opt/wheels}"
export PIP_ROOT_USER_ACTION=ignore PIP_DISABLE_PIP_VERSION_CHECK=1
# pip warns about every local index folder it does not find; keep real errors only.
quiet() { grep -v -e "^WARNING: Location" -e "Running pip as the .root. user" || true; }
say() { echo "[install] $*" >&2; }

if [ ! -x "$VENV/bin/python" ]; then
    say "creating $VENV ($("$PY" --version 2>&1))"
    "$PY" -m venv "$VENV"
fi
if [ "$("$VENV/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "$UV_VERSION" ]; then
    say "installing uv $UV_VERSION into $VENV"
    "$VENV/bin/python" -m pip install -q "uv==$UV_VERSION" 2> >(quiet >&2)
fi
UV="$VENV/bin/uv"

# What .venv must hold: the lock, and FlowCon itself editable (sync installs no dependency
# of its own, so none beyond the lock). The locked torch build if its wheel is here;
# otherwise the lock without torch.
requirements="$(mktemp)"
trap 'rm -f "$requirements"' EXIT
torch_pin="$(sed -n 's/^torch==//p' "$LOCK")"
sync_args=()
if [ -z "$torch_pin" ]; then
    cat "$LOCK" >"$requirements"
elif compgen -G "$WHEELS/torch-$torch_pin-*.whl" >/dev/null; then
    cat "$LOCK" >"$requirements"
    sync_args+=(--find-links "$WHEELS")
else
    say "no torch-$torch_pin wheel in $WHEELS (FLOWCON_WHEELS names the folder):" \
        "torch is not installed and the flowcon.elastic tests will be skipped"
    grep -v '^torch==' "$LOCK" >"$requirements"
fi
echo "-e ." >>"$requirements"
"$UV" pip sync --quiet --python "$VENV/bin/python" "${sync_args[@]}" "$requirements"
"$VENV/bin/python" -c "import flowcon, docker, apscheduler, yaml, psutil" \
    || { say "FlowCon did not install"; exit 1; }

# Chromium for the live views' browser tests (pytest -m browser); FLOWCON_NO_CHROMIUM=1
# skips it (those tests then skip, saying why).
if [ "${FLOWCON_NO_CHROMIUM:-}" != 1 ] && ! command -v chromium >/dev/null 2>&1 \
    && ! command -v chromium-browser >/dev/null 2>&1; then
    if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
        say "installing chromium (browser tests; FLOWCON_NO_CHROMIUM=1 skips)"
        apt_chromium() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                chromium >/dev/null 2>&1
        }
        apt_chromium || { apt-get update -q >/dev/null 2>&1 && apt_chromium; } \
            || say "chromium not installed: browser tests will skip"
    else
        say "no chromium (needs root and apt-get): browser tests will skip"
    fi
fi
