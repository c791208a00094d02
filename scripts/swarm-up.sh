#!/usr/bin/env bash
# A two-node Docker Swarm on this one machine, for the executor's swarm backend.
#
#   node1: the main engine (default socket), swarm manager, advertised on 127.0.0.1
#   node2: a second dockerd (unix:///run/flowcon-node2.sock, no iptables), swarm worker,
#          advertised on 127.0.0.2
#
# Node 2 gets its own bridge "flowcon-n2br" (172.31.254.1/24) rather than --bridge=none:
# a dockerd started with --bridge=none deletes the interface named docker0, and both engines
# share this machine's network namespace, so that would break the main engine's default
# bridge network (it happened; see docs/swarm.md). Job services use host networking anyway.
#
# Nodes are labelled flowcon.node=node1/node2 (the executor's placement constraint).
# Images named as arguments (default flowcon/testbox:latest) are copied into node 2, which
# cannot pull. Idempotent: what is already up is left as it is ("already up" on stderr when
# nothing had to be done). scripts/swarm-down.sh undoes it; it leaves the swarm only if this
# script created it (recorded in the state file).
#
#   scripts/swarm-up.sh [IMAGE...]
set -euo pipefail

ROOT=/var/lib/flowcon-node2
EXEC=/run/flowcon-node2
PIDFILE=/run/flowcon-node2.pid
SOCK=/run/flowcon-node2.sock
LOG=/var/log/flowcon-node2.log
STATE=/run/flowcon-swarm.state
BASE_TAR=/var/cache/flowcon/base-bookworm.tar
BRIDGE=flowcon-n2br
BRIDGE_CIDR=172.31.254.1/24
d2() { docker -H "unix://$SOCK" "$@"; }
log() { echo "[swarm-up] $*" >&2; }
changed=0

[ "$(id -u)" -eq 0 ] || { log "needs root (starts a second dockerd)"; exit 1; }
command -v dockerd >/dev/null || { log "dockerd not found"; exit 1; }
docker info >/dev/null 2>&1 || { log "the main engine does not answer"; exit 1; }
touch "$STATE"
record() { grep -q "^$1=" "$STATE" 2>/dev/null && sed -i "s|^$1=.*|$1=$2|" "$STATE" || echo "$1=$2" >>"$STATE"; }

# 1. the main engine as manager
case "$(docker info --format '{{.Swarm.LocalNodeState}}')" in
inactive)
    log "docker swarm init on the main engine (127.0.0.1)"
    docker swarm init --advertise-addr 127.0.0.1 --listen-addr 127.0.0.1:2377 >/dev/null
    record initialised_swarm 1
    changed=1
    ;;
active)
    if [ "$(docker info --format '{{.Swarm.ControlAvailable}}')" != "true" ]; then
        log "the main engine is a swarm worker, not a manager: cannot add node 2"
        exit 1
    fi
    grep -q '^initialised_swarm=' "$STATE" || record initialised_swarm 0
    ;;
*)
    log "main engine swarm state is $(docker info --format '{{.Swarm.LocalNodeState}}'); fix it first"
    exit 1
    ;;
esac

# 2. the second engine
if ! d2 info >/dev/null 2>&1; then
    mkdir -p "$ROOT" "$EXEC"
    rm -f "$SOCK"
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
        ip addr add "$BRIDGE_CIDR" dev "$BRIDGE"
        ip link set "$BRIDGE" up
        record bridge_created 1
    fi
    log "starting the node-2 dockerd (log: $LOG)"
    nohup dockerd \
        --data-root "$ROOT" --exec-root "$EXEC" --pidfile "$PIDFILE" \
        -H "unix://$SOCK" --bridge="$BRIDGE" --iptables=false --ip-masq=false \
        --cgroup-parent=/node2 \
        --containerd-namespace flowcon-node2 --containerd-plugins-namespace flowcon-node2-plugins \
        >"$LOG" 2>&1 </dev/null &
    record node2_started 1
    changed=1
    for _ in $(seq 1 60); do
        d2 info >/dev/null 2>&1 && break
        sleep 1
    done
    d2 info >/dev/null 2>&1 || { log "node-2 dockerd did not answer; tail of $LOG:"; tail -20 "$LOG" >&2; exit 1; }
fi

# 3. node 2 joins as a worker
if [ "$(d2 info --format '{{.Swarm.LocalNodeState}}')" != "active" ]; then
    token="$(docker swarm join-token -q worker)"
    log "node 2 joins the swarm (127.0.0.2)"
    d2 swarm join --token "$token" --advertise-addr 127.0.0.2 --listen-addr 127.0.0.2:2377 \
        127.0.0.1:2377 >/dev/null
    changed=1
fi
n1="$(docker info --format '{{.Swarm.NodeID}}')"
n2="$(d2 info --format '{{.Swarm.NodeID}}')"
record node2_id "$n2"

# 4. placement labels
for pair in "$n1:node1" "$n2:node2"; do
    id="${pair%%:*}" name="${pair#*:}"
    if [ "$(docker node inspect -f '{{index .Spec.Labels "flowcon.node"}}' "$id")" != "$name" ]; then
        docker node update --label-add "flowcon.node=$name" "$id" >/dev/null
        changed=1
    fi
done
for _ in $(seq 1 30); do
    [ "$(docker node inspect -f '{{.Status.State}}' "$n2")" = ready ] && break
    sleep 1
done

# 5. images for node 2 (it has no registry access)
[ "$#" -gt 0 ] || set -- flowcon/testbox:latest
for image in "$@"; do
    if have="$(d2 image inspect -f '{{.Id}}' "$image" 2>/dev/null)"; then
        # the base image is imported from the tarball on each side: its ids never match
        [ "$image" = flowcon/base:bookworm ] && continue
        [ "$have" = "$(docker image inspect -f '{{.Id}}' "$image" 2>/dev/null)" ] && continue
    fi
    changed=1
    if [ "$image" = flowcon/base:bookworm ] && [ -s "$BASE_TAR" ]; then
        log "importing $BASE_TAR into node 2"
        d2 import --change 'ENV PYTHONUNBUFFERED=1 LANG=C.UTF-8' --change 'CMD ["python3"]' \
            "$BASE_TAR" "$image" >/dev/null
    elif docker image inspect "$image" >/dev/null 2>&1; then
        log "copying $image into node 2"
        docker save "$image" | d2 load -q >/dev/null
    else
        log "image $image is not on the main engine either; skipped"
    fi
done

if [ "$changed" -eq 0 ]; then
    log "already up"
else
    log "up: node1=$n1 node2=$n2"
fi
