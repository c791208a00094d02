"""The tree speaks of the product as it is: no work-item numbers or "stop N" in code, tests
or docs (history lives in git and CHANGELOG.md). The rule is scripts/code_figures.py's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_no_development_history_in_the_tree() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "code_figures.py")],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    figures = json.loads(out.strip().splitlines()[-1])
    hits = [line.strip() for line in out.splitlines() if line.startswith("  ") and ":" in line]
    assert figures["history_references"] == 0, hits
