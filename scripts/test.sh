#!/usr/bin/env bash
# The whole test suite on a fresh machine, in two lanes.
#
#   1. Fast lane (a few minutes, no engine): install the Python side into .venv from the
#      lock (scripts/install.sh), then ruff, mypy --strict and the pure tests
#      (-m "not docker and not swarm and not alone") on two cores with pytest-xdist, the minutes-long
#      calibration (-m calibration) first. Any failure stops here, before the engine is
#      installed or an image is built.
#   2. Engine lane: start the engine, build the local images (cached), run the tests that
#      need it (-m "docker or swarm"), and the few pure tests marked ``alone`` that must not run
#      beside others.
#
# Extra arguments go to pytest: with arguments, the fast lane's lint and type check run and
# then `pytest "$@"` runs once after the engine is up (your selection decides what runs).
# FLOWCON_FAST_ONLY=1 stops after the fast lane; FLOWCON_TEST_WORKERS sets the number of
# pytest-xdist workers of the pure tests (default: the cores, at most 2).
#
# Every tool runs from the project virtualenv .venv (scripts/install.sh), which is put first
# on PATH: `python3`, `flowcon`, `ruff`, `mypy` and `pytest` below and in what they start are
# the locked ones, not the machine's.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore
VENV="$PWD/.venv"

# pytest exit 5 ("no tests collected") is not a failure when a lane's marker selects nothing.
run_pytest() {
    local lane="$1"
    shift
    set +e
    "$VENV/bin/python" -m pytest "$@"
    local rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "== $lane: pytest collected no tests" >&2
        return 0
    fi
    return "$rc"
}

lane_start=$(date +%s)
echo "== fast lane: install (Python side only)" >&2
bash scripts/install.sh
export VIRTUAL_ENV="$VENV" PATH="$VENV/bin:$PATH"
echo "== fast lane: ruff" >&2
"$VENV/bin/ruff" check .
"$VENV/bin/ruff" format --check .
echo "== fast lane: mypy --strict" >&2
"$VENV/bin/mypy"
if [ "$#" -eq 0 ]; then
    workers="${FLOWCON_TEST_WORKERS:-$(($(nproc) < 2 ? $(nproc) : 2))}"
    echo "== fast lane: pure tests ($workers xdist workers, the calibration first)" >&2
    # No engine may be reached from here: a pure test that needs one fails (tests/conftest.py).
    # The calibration (-m calibration) is one single-threaded simulation of minutes:
    # tests/conftest.py puts it first, so one worker starts on it while the other takes the
    # rest, and --dist worksteal evens out what is left.
    DOCKER_HOST=unix:///nonexistent/flowcon-fast-lane.sock FLOWCON_PURE_LANE=1 \
        run_pytest "fast lane" -m "not docker and not swarm and not alone" -n "$workers" \
            --dist worksteal
fi
echo "== fast lane passed in $(($(date +%s) - lane_start)) s" >&2
if [ "${FLOWCON_FAST_ONLY:-0}" = 1 ]; then
    exit 0
fi

echo "== engine lane: engine and images" >&2
bash scripts/ensure-engine.sh
bash images/testbox/build.sh
bash images/base/build.sh
bash images/elastic-example/build.sh
bash images/ddp-example/build.sh
# Debian trixie's dockerd (API 1.45), the second engine version the engine tests run on
# (fixture trixie_engine); a no-op once cached. Without it those tests skip (fail in CI).
bash scripts/engine-trixie.sh fetch || echo "== trixie's docker.io not fetched: see above" >&2
if [ "$#" -eq 0 ]; then
    echo "== engine lane: tests" >&2
    run_pytest "engine lane" -m "docker or swarm or alone"
else
    echo "== pytest $*" >&2
    # Exit 5 is reported as is here: a selection that matches nothing is the caller's mistake.
    set +e
    "$VENV/bin/python" -m pytest "$@"
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests" >&2
    fi
    exit "$rc"
fi
