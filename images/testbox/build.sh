#!/usr/bin/env bash
# A tiny (~2 MB) image from Debian's static busybox, for tests that need many quick
# containers (shell + awk are enough to emit metric lines). Built in seconds.
#
#   images/testbox/build.sh [IMAGE] [DOCKER_HOST]
set -euo pipefail

IMAGE="${1:-flowcon/testbox:latest}"
if [ -n "${2:-}" ]; then export DOCKER_HOST="$2"; fi

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
    exit 0
fi
if [ ! -x /bin/busybox ] || ! file -L /bin/busybox 2>/dev/null | grep -q static; then
    if ! dpkg -s busybox-static >/dev/null 2>&1; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null
    fi
fi
ROOT="$(mktemp -d)"
trap 'rm -rf "$ROOT"' EXIT
mkdir -p "$ROOT/bin" "$ROOT/tmp" "$ROOT/proc" "$ROOT/sys" "$ROOT/dev" "$ROOT/etc"
cp /bin/busybox "$ROOT/bin/busybox"
for applet in sh awk sleep echo cat date seq kill trap true false printf ls env head yes; do
    ln -sf busybox "$ROOT/bin/$applet"
done
echo "root:x:0:0:root:/:/bin/sh" > "$ROOT/etc/passwd"
tar -C "$ROOT" -c . | docker import --change 'CMD ["/bin/sh"]' - "$IMAGE" >/dev/null
echo "[testbox] $IMAGE ready" >&2
