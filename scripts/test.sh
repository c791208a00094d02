#!/usr/bin/env bash
# The whole test suite on a fresh machine, in two lanes.
#
#   1. Fast lane (a few minutes, no engine): install the Python side, then ruff, mypy
#      --strict and the pure tests (-m "not docker and not swarm"; the long calibration,
#      -m calibration, in a second pytest beside them). Any failure stops here, before the
#      engine is installed or an image is built.
#   2. Engine lane: start the engine, build the local images (cached), run the tests that
#      need it (-m "docker or swarm").
#
# Extra arguments go to pytest: with arguments, the fast lane's lint and type check run and
# then `pytest "$@"` runs once after the engine is up (your selection decides what runs).
# FLOWCON_FAST_ONLY=1 stops after the fast lane.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore

# pytest exit 5 ("no tests collected") is not a failure when a lane's marker selects nothing.
run_pytest() {
    local lane="$1"
    shift
    set +e
    python3 -m pytest "$@"
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
echo "== fast lane: ruff" >&2
ruff check .
ruff format --check .
echo "== fast lane: mypy --strict" >&2
mypy
if [ "$#" -eq 0 ]; then
    echo "== fast lane: pure tests (the minutes-long published-world calibration beside them)" >&2
    # No engine may be reached from here: a pure test that needs one fails (tests/conftest.py).
    # The calibration (-m calibration) is one long single-threaded simulation: it runs on
    # the second core while the other pure tests run on the first.
    calib_log=$(mktemp)
    DOCKER_HOST=unix:///nonexistent/flowcon-fast-lane.sock FLOWCON_PURE_LANE=1 \
        run_pytest "calibration" -m "calibration and not docker and not swarm" >"$calib_log" 2>&1 &
    calib_pid=$!
    stop_calibration() { kill "$calib_pid" 2>/dev/null || true; }
    trap stop_calibration EXIT
    trap 'stop_calibration; exit 143' TERM
    trap 'stop_calibration; exit 130' INT
    fast_rc=0
    DOCKER_HOST=unix:///nonexistent/flowcon-fast-lane.sock FLOWCON_PURE_LANE=1 \
        run_pytest "fast lane" -m "not docker and not swarm and not calibration" || fast_rc=$?
    calib_rc=0
    wait "$calib_pid" || calib_rc=$?
    trap - EXIT TERM INT
    echo "== fast lane: calibration (ran beside the pure tests)" >&2
    cat "$calib_log" >&2
    rm -f "$calib_log"
    if [ "$fast_rc" -ne 0 ] || [ "$calib_rc" -ne 0 ]; then
        echo "== fast lane failed (pure tests rc $fast_rc, calibration rc $calib_rc)" >&2
        exit 1
    fi
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
    run_pytest "engine lane" -m "docker or swarm"
else
    echo "== pytest $*" >&2
    # Exit 5 is reported as is here: a selection that matches nothing is the caller's mistake.
    set +e
    python3 -m pytest "$@"
    rc=$?
    set -e
    if [ "$rc" -eq 5 ]; then
        echo "pytest collected no tests" >&2
    fi
    exit "$rc"
fi
