"""flowcon.agent and flowcon.listeners resolve next to the flowcon package imported, never
to another checkout's folders (e.g. one installed editable)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_mapping_is_relative_symlinks() -> None:
    for name in ("agent", "listeners"):
        link = REPO / "flowcon" / name
        assert link.is_symlink() and os.readlink(link) == f"../{name}"


def test_a_copy_imports_its_own_agent(tmp_path: Path) -> None:
    """A second checkout, run with its own PYTHONPATH, imports its own agent code even
    when this one (or any other) is installed editable."""
    copy = tmp_path / "checkout"
    copy.mkdir()
    for name in ("flowcon", "agent", "listeners"):
        shutil.copytree(
            REPO / name, copy / name, symlinks=True, ignore=shutil.ignore_patterns("__pycache__")
        )
    code = (
        "import flowcon, flowcon.agent.controller as c, flowcon.listeners.events as e; "
        "print(flowcon.__file__); print(c.__file__); print(e.__file__)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert out == [
        str(copy / "flowcon" / "__init__.py"),
        str(copy / "flowcon" / "agent" / "controller.py"),
        str(copy / "flowcon" / "listeners" / "events.py"),
    ]
