"""The package is plain folders: no symlinks anywhere under ``flowcon/``, and every
folder with Python modules is a package setuptools finds."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_no_symlinks_in_the_package() -> None:
    links = [p for p in (REPO / "flowcon").rglob("*") if p.is_symlink()]
    assert links == []


def test_every_module_folder_is_a_package() -> None:
    folders = {p.parent for p in (REPO / "flowcon").rglob("*.py")}
    missing = [f for f in folders if not (f / "__init__.py").exists()]
    assert missing == []
