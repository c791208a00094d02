#!/usr/bin/env bash
# The main job on a fresh machine: install FlowCon (into .venv, from the lock), make sure a
# Docker engine runs, then run the agent on the local engine. Extra arguments go to
# `flowcon agent`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
bash scripts/ensure-engine.sh
exec .venv/bin/flowcon agent "$@"
