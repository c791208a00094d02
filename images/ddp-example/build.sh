#!/usr/bin/env bash
# Build flowcon/ddp-example:latest FROM ${BASE_IMAGE:-flowcon/base:bookworm}: the base image
# plus /opt/train_ddp.py, a plain torchrun DDP script (docker's layer cache decides rebuilds).
#
#   images/ddp-example/build.sh [IMAGE] [DOCKER_HOST]
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
IMAGE="${1:-flowcon/ddp-example:latest}"
BASE_IMAGE="${BASE_IMAGE:-flowcon/base:bookworm}"
if [ -n "${2:-}" ]; then export DOCKER_HOST="$2"; fi

if ! docker image inspect "$BASE_IMAGE" >/dev/null 2>&1; then
    bash "$REPO/images/base/build.sh" "$BASE_IMAGE"
fi
CTX="$(mktemp -d)"
trap 'rm -rf "$CTX"' EXIT
cp "$HERE/Dockerfile" "$HERE/train_ddp.py" "$HERE/train_min.py" "$CTX/"
if ! DOCKER_BUILDKIT=0 docker build -q --build-arg "BASE_IMAGE=$BASE_IMAGE" -t "$IMAGE" "$CTX" >"$CTX/build.log" 2>&1; then
    cat "$CTX/build.log" >&2
    exit 1
fi
echo "[ddp-example] $IMAGE ready" >&2
