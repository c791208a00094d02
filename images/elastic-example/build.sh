#!/usr/bin/env bash
# Build flowcon/elastic-example:latest FROM ${BASE_IMAGE:-flowcon/base:bookworm}.
# Rebuilds when train.py, flowcon/elastic/*.py, flowcon/core/batch_search.py or flowcon/contract.py
# changed (docker's layer cache decides).
#
#   images/elastic-example/build.sh [IMAGE] [DOCKER_HOST]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
IMAGE="${1:-flowcon/elastic-example:latest}"
BASE_IMAGE="${BASE_IMAGE:-flowcon/base:bookworm}"
if [ -n "${2:-}" ]; then export DOCKER_HOST="$2"; fi

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    bash "$REPO/images/base/build.sh" "$BASE_IMAGE"
fi
CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
mkdir -p "$CTX/flowcon"
cp "$HERE/Dockerfile" "$HERE/train.py" "$CTX/"
cp "$REPO/flowcon/__init__.py" "$REPO/flowcon/report.py" "$REPO/flowcon/contract.py" "$CTX/flowcon/"
# the training side is a package (flowcon/elastic/): copy its modules, not caches
mkdir -p "$CTX/flowcon/elastic"
cp "$REPO"/flowcon/elastic/*.py "$CTX/flowcon/elastic/"
# and the pure core modules it uses (stdlib only): the largest-batch search
mkdir -p "$CTX/flowcon/core"
cp "$REPO/flowcon/core/__init__.py" "$REPO/flowcon/core/batch_search.py" "$CTX/flowcon/core/"
if ! DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE" "$CTX" >"$CTX/build.log" 2>&1; then
    cat "$CTX/build.log" >&2
    exit 1
fi
echo "[elastic-example] $IMAGE ready" >&2
