#!/usr/bin/env bash
# Build the agent image FROM flowcon/base:bookworm, without any registry and without
# network inside the build: the dependencies are fetched on the host (pip download of
# manylinux/pure wheels for CPython 3.11, the base image's Python) and copied in.
#
#   agent/build.sh [IMAGE] [DOCKER_HOST]
set -euo pipefail
cd "$(dirname "$0")/.."
IMAGE="${1:-flowcon/agent:latest}"
if [ -n "${2:-}" ]; then export DOCKER_HOST="$2"; fi
PY="${PYTHON:-python3}"
log() { echo "[agent-image] $*" >&2; }

if ! docker image inspect flowcon/base:bookworm >/dev/null 2>&1; then
    log "building the base image first"
    bash images/base/build.sh
fi
CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
log "dependencies -> $CTX/lib"
PIP_ROOT_USER_ACTION=ignore "$PY" -m pip install --quiet --disable-pip-version-check \
    --target "$CTX/lib" --only-binary=:all: --implementation cp --python-version 3.11 \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux_2_28_x86_64 --platform any \
    "docker>=7.0,<8" "psutil>=5.9" "APScheduler>=3.10,<4" "PyYAML>=6.0" "click>=8.1" \
    "rich>=13.0" "prometheus_client>=0.17" "nvidia-ml-py>=12.0" "pydantic>=2.6,<3" \
    "regex>=2023.0"
rm -rf "$CTX"/lib/bin
mkdir -p "$CTX/src"
tar --exclude=__pycache__ -cf - flowcon | tar -C "$CTX/src" -xf -
cp agent/Dockerfile agent/flowcon.yaml "$CTX/"
log "docker build $IMAGE"
docker build -q -t "$IMAGE" "$CTX" >/dev/null
log "$IMAGE ready ($(docker image inspect "$IMAGE" --format '{{.Size}}') bytes)"
