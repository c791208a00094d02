#!/usr/bin/env bash
# Make sure a Docker engine answers on the default socket: install Debian's docker.io
# when dockerd is missing, start dockerd in the background when nothing answers.
# Idempotent; safe to call from every entry point.
set -euo pipefail

log() { echo "[ensure-engine] $*" >&2; }

if docker info >/dev/null 2>&1; then
    exit 0
fi

if ! command -v dockerd >/dev/null 2>&1; then
    log "dockerd not found: installing Debian's docker.io"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq docker.io >/dev/null
fi
if ! command -v docker >/dev/null 2>&1; then
    log "docker CLI not found: installing docker-cli"
    apt-get install -y -qq docker-cli >/dev/null || true
fi

if ! docker info >/dev/null 2>&1; then
    if [ -S /var/run/docker.sock ] && ! pgrep -x dockerd >/dev/null; then
        rm -f /var/run/docker.sock /var/run/docker.pid
    fi
    if ! pgrep -x dockerd >/dev/null; then
        log "starting dockerd (log: /var/log/flowcon-dockerd.log)"
        nohup dockerd >/var/log/flowcon-dockerd.log 2>&1 &
    fi
    for _ in $(seq 1 60); do
        docker info >/dev/null 2>&1 && break
        sleep 1
    done
fi

if ! docker info >/dev/null 2>&1; then
    log "the Docker engine did not answer within 60 s; see /var/log/flowcon-dockerd.log"
    tail -20 /var/log/flowcon-dockerd.log >&2 || true
    exit 1
fi
log "engine ready: $(docker version --format '{{.Server.Version}} (API {{.Server.APIVersion}})')"
