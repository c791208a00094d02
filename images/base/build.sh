#!/usr/bin/env bash
# Build the local base image (Debian bookworm minbase + python3 + PyTorch CPU + numpy)
# without any registry: debootstrap from Debian's mirror, then `docker import`.
# Cached twice: the image itself, and a rootfs tarball that other engines (a second
# swarm node) import without running debootstrap again.
#
#   images/base/build.sh [IMAGE] [DOCKER_HOST]
set -euo pipefail

IMAGE="${1:-${FLOWCON_BASE_IMAGE:-flowcon/base:bookworm}}"
if [ -n "${2:-}" ]; then export DOCKER_HOST="$2"; fi
CACHE_DIR="${FLOWCON_CACHE_DIR:-/var/cache/flowcon}"
TARBALL="$CACHE_DIR/base-bookworm.tar"
PACKAGES="python3,python3-torch,python3-numpy,ca-certificates,procps"

log() { echo "[base-image] $*" >&2; }

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    log "$IMAGE present"
    exit 0
fi

mkdir -p "$CACHE_DIR"
if [ ! -s "$TARBALL" ]; then
    if ! command -v debootstrap >/dev/null 2>&1; then
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
    fi
    ROOT="$(mktemp -d "$CACHE_DIR/rootfs.XXXXXX")"
    trap 'rm -rf "$ROOT"' EXIT
    log "debootstrap bookworm into $ROOT (about 2 minutes)"
    debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOT" >"$CACHE_DIR/debootstrap.log" 2>&1 \
        || { tail -30 "$CACHE_DIR/debootstrap.log" >&2; exit 1; }
    # Keep the image small: no apt lists, docs or caches.
    rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* \
        "$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
    tar -C "$ROOT" -cf "$TARBALL.partial" .
    mv "$TARBALL.partial" "$TARBALL"
fi
log "importing $TARBALL as $IMAGE"
docker import \
    --change 'ENV PYTHONUNBUFFERED=1 LANG=C.UTF-8' \
    --change 'CMD ["python3"]' \
    "$TARBALL" "$IMAGE" >/dev/null
log "$IMAGE ready"
