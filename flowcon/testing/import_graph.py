"""The import graph of the ``flowcon`` package, read from the sources with ``ast`` (no
import runs), and the cycles in it. Used by tests/test_import_graph.py (no cycle, the
layers) and scripts/code_figures.py (the cycle count).

The graph: one node per module of the package (``flowcon/``); an edge ``a -> b`` when ``a``
imports ``b``.

What counts as an import:

- every ``import`` / ``from ... import`` in the module, at module level *or inside a
  function or method*: a lazy import that only postpones a cycle to call time is still a
  cycle (the two modules still need each other), so it counts;
- imports under ``if TYPE_CHECKING:`` too: they never run, but the module is written
  against the other one's names all the same (a reader, or a refactoring, has to know both);
- ``from pkg import name`` is an edge to ``pkg`` (its ``__init__`` runs and its namespace
  is read: a package whose ``__init__`` imports the module is in a cycle with it) and to
  ``pkg.name`` when that is a module (a package's own ``__init__`` importing its submodules
  is no edge to itself); ``import a.b.c`` is an edge to the longest prefix
  that is a module of the package.
- Other than that, a package's ``__init__`` that Python runs before a submodule is not an
  edge: only what the source names. Imports of modules outside the package are ignored.

A cycle is a strongly connected component with more than one module (or a module that
imports itself); ``find_cycles`` gives one concrete loop through each.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "flowcon"

Graph = Mapping[str, set[str]]


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` of the package (plain folders)."""
    out: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("").parts
        out[".".join(rel[:-1] if rel[-1] == "__init__" else rel)] = path
    return out


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth (``if TYPE_CHECKING:`` bodies included)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _resolve(name: str, modules: Mapping[str, object] | set[str]) -> str | None:
    """The longest prefix of ``name`` that is a module of the package."""
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        cand = ".".join(parts[:i])
        if cand in modules:
            return cand
    return None


def imports_of(source: str, module: str, is_package: bool, modules: set[str]) -> set[str]:
    """The package modules ``module`` (whose source is ``source``) imports."""
    out: set[str] = set()
    for node in _import_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = node.module or ""
            if node.level:
                here = module.split(".") if is_package else module.split(".")[:-1]
                anchor = here[: len(here) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            if base == module and is_package:
                # a package's __init__ importing its own submodules: no edge to itself
                targets = targets[1:]
            targets = [t for t in targets if t in modules] or [base]
        for t in targets:
            found = _resolve(t, modules)
            if found is not None:
                out.add(found)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    names = set(files)
    return {
        m: imports_of(p.read_text(), m, p.name == "__init__.py", names) for m, p in files.items()
    }


def strongly_connected(graph: Graph) -> list[list[str]]:
    """Tarjan's strongly connected components (iterative), each sorted, in sorted order."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    comps: list[list[str]] = []
    nodes = sorted(set(graph) | {d for deps in graph.values() for d in deps})
    for start in nodes:
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, it = work[-1]
            nxt = next(it, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp: list[str] = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp.append(top)
                    if top == node:
                        break
                comps.append(sorted(comp))
    return sorted(comps)


def _loop_through(graph: Graph, comp: list[str]) -> list[str]:
    """A shortest import loop from the component's first module back to it (BFS)."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt: list[str] = []
        for node in frontier:
            for dep in sorted(graph.get(node, ())):
                if dep == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if dep in members and dep not in prev:
                    prev[dep] = node
                    nxt.append(dep)
        frontier = nxt
    return [start, start]


def find_cycles(graph: Graph) -> list[list[str]]:
    """One loop per import cycle: ``[a, b, ..., a]``."""
    return [
        _loop_through(graph, comp)
        for comp in strongly_connected(graph)
        if len(comp) > 1 or comp[0] in graph.get(comp[0], ())
    ]
