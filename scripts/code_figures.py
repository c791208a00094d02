"""Figures about the code base itself, for maintainers (printed as a table, JSON last).

    python3 scripts/code_figures.py [--top 5]

Reports the largest modules by lines, ``Any`` per package, words per docs page, import
cycles (``TYPE_CHECKING`` and function-level imports counted) and references to
development history (work-item numbers, "stop N") in code, tests and docs.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import defaultdict
from pathlib import Path

from flowcon.testing.import_graph import find_cycles, import_graph

ROOT = Path(__file__).resolve().parent.parent
CODE_DIRS = ("flowcon", "tests", "benchmarks", "scripts")
TEXT_GLOBS = ("*.md", "docs/**/*.md", "flowcon/**/*.py", "tests/**/*.py", "benchmarks/**/*.py")
# Development history in the tree: "stop 31", "issue 12", results folders named after
# work items. Numbers with a decimal point after "stop" ("stop 0.50 s") are durations.
HISTORY = re.compile(
    r"\bstops? \d+(?![.\d])|\bissues? ?#?\d+\b|\bissue\d+|\bwork[- ]items? \d+|\bthe lead\b",
    re.IGNORECASE,
)
ANY = re.compile(r"\bAny\b")


def python_files(folder: str) -> list[Path]:
    base = ROOT / folder
    return sorted(p for p in base.rglob("*.py") if "rootfs" not in p.parts and p.is_file())


def cycles() -> list[list[str]]:
    """One loop per import cycle, by the import-graph test's own reading of the sources."""
    return find_cycles(import_graph(ROOT))


def history_references() -> list[str]:
    hits: list[str] = []
    seen: set[Path] = set()
    for pattern in TEXT_GLOBS:
        for path in sorted(ROOT.glob(pattern)):
            if path in seen or "rootfs" in path.parts or path.name == "CHANGELOG.md":
                continue
            seen.add(path)
            if path == Path(__file__).resolve():
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if HISTORY.search(line):
                    hits.append(f"{path.relative_to(ROOT)}:{number}")
    for folder in sorted((ROOT / "docs").rglob("*")):
        if folder.is_dir() and HISTORY.search(folder.name):
            hits.append(f"{folder.relative_to(ROOT)}/ (folder name)")
    return hits


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=5)
    args = parser.parse_args()

    sizes = sorted(
        (
            (len(p.read_text(encoding="utf-8").splitlines()), str(p.relative_to(ROOT)))
            for p in python_files("flowcon")
        ),
        reverse=True,
    )
    any_per_package: dict[str, int] = defaultdict(int)
    for path in python_files("flowcon"):
        rel = path.relative_to(ROOT).parts
        package = "/".join(rel[:2]) if len(rel) > 2 else rel[0]
        any_per_package[package] += len(ANY.findall(path.read_text(encoding="utf-8")))
    words = {
        str(p.relative_to(ROOT)): len(p.read_text(encoding="utf-8").split())
        for p in sorted([*ROOT.glob("*.md"), *(ROOT / "docs").glob("*.md")])
    }
    found_cycles = cycles()
    history = history_references()
    code_lines = sum(
        len(p.read_text(encoding="utf-8").splitlines()) for p in python_files("flowcon")
    )
    test_lines = sum(len(p.read_text(encoding="utf-8").splitlines()) for p in python_files("tests"))

    print(f"lines: flowcon {code_lines}, tests {test_lines}")
    print(f"largest {args.top} modules:")
    for lines, name in sizes[: args.top]:
        print(f"  {lines:6d}  {name}")
    print("Any per package:")
    for package, count in sorted(any_per_package.items(), key=lambda kv: -kv[1]):
        if count:
            print(f"  {count:6d}  {package}")
    print("words per docs page:")
    for name, count in words.items():
        print(f"  {count:6d}  {name}")
    print(f"import cycles (TYPE_CHECKING and lazy imports counted): {len(found_cycles)}")
    for comp in found_cycles:
        print("  " + " -> ".join(comp))
    print(f"development-history references: {len(history)}")
    for hit in history[:20]:
        print(f"  {hit}")
    print(
        json.dumps(
            {
                "code_lines": code_lines,
                "test_lines": test_lines,
                "largest_modules": {name: lines for lines, name in sizes[: args.top]},
                "any_per_package": dict(sorted(any_per_package.items())),
                "docs_words": words,
                "cycles": len(found_cycles),
                "history_references": len(history),
            }
        )
    )


if __name__ == "__main__":
    main()
