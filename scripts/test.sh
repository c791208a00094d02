#!/usr/bin/env bash
# The whole test suite on a fresh machine: install, start the engine, build the local
# images once (cached), then lint, type-check the pure core, and run pytest.
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
export PIP_ROOT_USER_ACTION=ignore
bash scripts/install.sh
bash scripts/ensure-engine.sh
bash images/testbox/build.sh
bash images/base/build.sh
bash images/elastic-example/build.sh

echo "== ruff" >&2
ruff check .
ruff format --check .
echo "== mypy (pure core)" >&2
mypy
echo "== pytest" >&2
set +e
python3 -m pytest "$@"
rc=$?
set -e
if [ "$rc" -eq 5 ]; then
    echo "pytest collected no tests" >&2
fi
exit "$rc"
