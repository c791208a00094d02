"""Every ``containers.list(...)`` of the Docker SDK in this repository is safe against a
container that goes away while the list is read.

Without ``sparse=True`` the SDK inspects each listed container one by one, and one removed
in between raises ``NotFound`` (a 404 on ``/containers/<id>/json``). That is what failed a
CI run (2026-11-26): ``test_stack_swarm.py``'s cleanup polled a stack's containers while
``docker stack rm`` removed them. ``ignore_removed=True`` (or ``sparse=True``) skips them.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CALL = "containers.list("


def unsafe_calls(text: str) -> list[str]:
    """The argument lists of the ``containers.list`` calls in ``text`` with neither
    ``sparse`` nor ``ignore_removed``."""
    out = []
    i = text.find(CALL)
    while i >= 0:
        start = i + len(CALL)
        depth, j = 1, start
        while depth and j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            j += 1
        args = text[start : j - 1]
        if "sparse" not in args and "ignore_removed" not in args:
            out.append(args.strip())
        i = text.find(CALL, j)
    return out


def test_the_check_finds_an_unsafe_call() -> None:
    code = "a = c.containers.list(all=True, filters={'label': f(x)})\nb = c.containers.list()\n"
    assert unsafe_calls(code) == ["all=True, filters={'label': f(x)}", ""]
    assert unsafe_calls("c.containers.list(all=True, ignore_removed=True)") == []
    assert unsafe_calls("c.containers.list(\n    sparse=True, all=True\n)") == []


def test_every_container_listing_ignores_removed_containers() -> None:
    found = {}
    for folder in ("flowcon", "agent", "listeners", "benchmarks", "scripts", "tests"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name == Path(__file__).name:
                continue
            bad = unsafe_calls(path.read_text(errors="replace"))
            if bad:
                found[str(path.relative_to(REPO))] = bad
    assert not found, found
