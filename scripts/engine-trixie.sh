#!/usr/bin/env bash
# A second, private Docker engine of a newer API version: Debian trixie's docker.io
# (Docker 26.1, API 1.45), next to the host's engine (bookworm's 20.10, API 1.41). The
# engine tests run the agent against both (tests/conftest.py, fixture trixie_engine).
#
#   scripts/engine-trixie.sh fetch   download trixie's docker.io .deb once (cached) and unpack it
#   scripts/engine-trixie.sh up      start its dockerd on its own socket, import the test image
#   scripts/engine-trixie.sh down    stop it and remove its socket, roots and bridge
#   scripts/engine-trixie.sh host    print its DOCKER_HOST (unix:///run/flowcon-trixie.sock)
#
# fetch reads a trixie apt source through a private apt directory (its own sources list,
# lists and cache under $CACHE/apt): the host's apt sources and state are never changed.
# Only dockerd comes from trixie; containerd, runc and docker-init are the host's (dockerd
# talks to the host's containerd in namespaces of its own, as scripts/swarm-up.sh's node 2).
#
# The engine gets its own socket, data root, exec root, pidfile and bridge "flowcon-trbr"
# (never --bridge=none: a dockerd started with it deletes the interface docker0, which the
# host's engine needs; all engines here share one network namespace).
set -euo pipefail

CACHE=${FLOWCON_TRIXIE_CACHE:-/var/cache/flowcon/trixie}
MIRROR=${FLOWCON_TRIXIE_MIRROR:-http://deb.debian.org/debian}
KEYRING=/usr/share/keyrings/debian-archive-keyring.gpg
ROOT=/var/lib/flowcon-trixie
EXEC=/run/flowcon-trixie
PIDFILE=/run/flowcon-trixie.pid
SOCK=/run/flowcon-trixie.sock
LOG=/var/log/flowcon-trixie.log
STATE=/run/flowcon-trixie.state
BRIDGE=flowcon-trbr
BRIDGE_CIDR=172.31.252.1/24
IMAGES=(flowcon/testbox:latest)
DOCKERD="$CACHE/root/usr/sbin/dockerd"
log() { echo "[engine-trixie] $*" >&2; }
d2() { docker -H "unix://$SOCK" "$@"; }

fetch() {
    if [ -x "$DOCKERD" ] && "$DOCKERD" --version >/dev/null 2>&1; then
        log "cached: $("$DOCKERD" --version)"
        return 0
    fi
    command -v apt-get >/dev/null || { log "apt-get not found: cannot fetch trixie's docker.io"; exit 1; }
    local apt="$CACHE/apt"
    mkdir -p "$apt/lists/partial" "$apt/cache/archives/partial" "$apt/etc" "$CACHE/debs"
    echo "deb [signed-by=$KEYRING] $MIRROR trixie main" >"$apt/etc/sources.list"
    local opts=(
        -o "Dir::Etc::sourcelist=$apt/etc/sources.list"
        -o "Dir::Etc::sourceparts=$apt/etc/none"
        -o "Dir::State::Lists=$apt/lists"
        -o "Dir::Cache=$apt/cache"
        -o "Debug::NoLocking=1"
        -o "APT::Get::List-Cleanup=0"
        -o "Acquire::Languages=none"
    )
    log "apt-get update from $MIRROR trixie (private lists in $apt)"
    apt-get -q "${opts[@]}" update >"$apt/update.log" 2>&1 || {
        tail -5 "$apt/update.log" >&2
        log "cannot read the trixie apt source"
        exit 1
    }
    (cd "$CACHE/debs" && apt-get -q "${opts[@]}" download docker.io >"$apt/download.log" 2>&1) || {
        tail -5 "$apt/download.log" >&2
        log "cannot download docker.io from trixie"
        exit 1
    }
    rm -rf "$CACHE/root.tmp"
    mkdir -p "$CACHE/root.tmp"
    for deb in "$CACHE"/debs/docker.io_*.deb; do
        dpkg -x "$deb" "$CACHE/root.tmp"
    done
    rm -rf "$CACHE/root"
    mv "$CACHE/root.tmp" "$CACHE/root"
    "$DOCKERD" --version >/dev/null || { log "the unpacked dockerd does not run"; exit 1; }
    log "fetched: $("$DOCKERD" --version)"
}

up() {
    [ "$(id -u)" -eq 0 ] || { log "needs root (starts a dockerd)"; exit 1; }
    [ -x "$DOCKERD" ] || fetch
    if d2 version >/dev/null 2>&1; then
        log "already up: $SOCK"
    else
        mkdir -p "$ROOT" "$EXEC"
        rm -f "$SOCK"
        : >"$STATE"
        if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
            ip link add "$BRIDGE" type bridge
            ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
            ip link set "$BRIDGE" up
            echo bridge_created=1 >>"$STATE"
        fi
        log "starting trixie's dockerd (log: $LOG)"
        PATH="$CACHE/root/usr/sbin:$CACHE/root/usr/bin:$PATH" nohup "$DOCKERD" \
            --data-root "$ROOT" --exec-root "$EXEC" --pidfile "$PIDFILE" \
            -H "unix://$SOCK" --bridge="$BRIDGE" --iptables=false --ip-masq=false \
            --cgroup-parent=/flowcon-trixie \
            --containerd-namespace flowcon-trixie --containerd-plugins-namespace flowcon-trixie-plugins \
            >"$LOG" 2>&1 </dev/null &
        for _ in $(seq 1 60); do
            d2 version >/dev/null 2>&1 && break
            sleep 1
        done
        d2 version >/dev/null 2>&1 || { log "trixie's dockerd did not answer; tail of $LOG:"; tail -20 "$LOG" >&2; exit 1; }
    fi
    for image in "${IMAGES[@]}"; do
        if [ "$(d2 image inspect -f '{{.Id}}' "$image" 2>/dev/null)" != "$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" ]; then
            if docker image inspect "$image" >/dev/null 2>&1; then
                log "copying $image into the trixie engine"
                docker save "$image" | d2 load -q >/dev/null
            else
                log "image $image is not on the host's engine; not copied"
            fi
        fi
    done
    log "up: unix://$SOCK, $(d2 version -f 'Engine {{.Server.Version}}, API {{.Server.APIVersion}} (min {{.Server.MinAPIVersion}})')"
}

down() {
    if [ -s "$PIDFILE" ]; then
        local pid
        pid="$(cat "$PIDFILE")"
        if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/comm" 2>/dev/null; then
            # its containers first, so their shims do not outlive it
            d2 ps -aq 2>/dev/null | xargs -r docker -H "unix://$SOCK" rm -f >/dev/null 2>&1 || true
            kill "$pid"
            for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
            kill -0 "$pid" 2>/dev/null && { log "dockerd still running after 30 s: SIGKILL"; kill -9 "$pid"; }
            log "trixie's dockerd stopped"
        fi
    fi
    rm -f "$SOCK" "$PIDFILE"
    for dir in "$EXEC" "$ROOT"; do
        if [ -d "$dir" ]; then
            grep -o " $dir[^ ]*" /proc/mounts | sort -r | xargs -r -n1 umount -l || true
            rm -rf "$dir"
        fi
    done
    if grep -q '^bridge_created=1' "$STATE" 2>/dev/null && ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE" && log "removed bridge $BRIDGE"
    fi
    rm -f "$STATE"
}

case "${1:-}" in
fetch) fetch ;;
up) up ;;
down) down ;;
host) echo "unix://$SOCK" ;;
*)
    echo "usage: $0 fetch|up|down|host" >&2
    exit 2
    ;;
esac
