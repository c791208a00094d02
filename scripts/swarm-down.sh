#!/usr/bin/env bash
# Undo scripts/swarm-up.sh: node 2 leaves and its dockerd stops; the main engine leaves
# the swarm only if swarm-up initialised it. --purge also deletes node 2's data root.
#
#   scripts/swarm-down.sh [--purge]
set -uo pipefail

ROOT=/var/lib/flowcon-node2
PIDFILE=/run/flowcon-node2.pid
SOCK=/run/flowcon-node2.sock
STATE=/run/flowcon-swarm.state
d2() { docker -H "unix://$SOCK" "$@"; }
log() { echo "[swarm-down] $*" >&2; }
get() { sed -n "s/^$1=//p" "$STATE" 2>/dev/null | tail -1; }

n2="$(get node2_id)"
if d2 info >/dev/null 2>&1; then
    [ -z "$n2" ] && n2="$(d2 info --format '{{.Swarm.NodeID}}' 2>/dev/null)"
    d2 swarm leave --force >/dev/null 2>&1 && log "node 2 left the swarm"
fi
if [ -n "$n2" ] && docker node inspect "$n2" >/dev/null 2>&1; then
    docker node rm --force "$n2" >/dev/null 2>&1 && log "node 2 removed from the node list"
fi
if [ -s "$PIDFILE" ]; then
    pid="$(cat "$PIDFILE")"
    if kill -0 "$pid" 2>/dev/null && grep -q dockerd "/proc/$pid/comm" 2>/dev/null; then
        kill "$pid"
        for _ in $(seq 1 30); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
        kill -0 "$pid" 2>/dev/null && { log "node-2 dockerd still running after 30 s: SIGKILL"; kill -9 "$pid"; }
        log "node-2 dockerd stopped"
    fi
fi
rm -f "$SOCK"
if [ "$(get bridge_created)" = 1 ] && ip link show flowcon-n2br >/dev/null 2>&1; then
    ip link del flowcon-n2br && log "removed bridge flowcon-n2br"
fi
if [ "$(get initialised_swarm)" = 1 ]; then
    docker swarm leave --force >/dev/null 2>&1 && log "main engine left the swarm (swarm-up had created it)"
    # `swarm init` made this network; leaving the swarm does not remove it.
    docker network rm docker_gwbridge >/dev/null 2>&1 && log "removed docker_gwbridge"
fi
rm -f "$STATE"
if [ "${1:-}" = --purge ]; then
    rm -rf "$ROOT" && log "removed $ROOT"
fi
exit 0
