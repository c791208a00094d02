"""No import cycle anywhere in the ``flowcon`` package (pure: reads the sources with ``ast``).

The graph: one node per module of the package (``flowcon/``); an edge ``a -> b`` when ``a``
imports ``b``.

What counts as an import:

- every ``import`` / ``from ... import`` in the module, at module level *or inside a
  function or method*: a lazy import that only postpones a cycle to call time is still a
  cycle (the two modules still need each other), so it fails here too;
- except imports under ``if TYPE_CHECKING:`` (they never run);
- ``from pkg import name`` is an edge to ``pkg.name`` when that is a module, else to ``pkg``;
  ``import a.b.c`` is an edge to the longest prefix that is a module of the package.
- A package's ``__init__`` that Python runs before a submodule is not an edge: only what
  the source names. Imports of modules outside the package are ignored.

A cycle is a strongly connected component with more than one module (or a module that
imports itself); the failure lists each one with a concrete loop through it.
"""

from __future__ import annotations

import ast
import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "flowcon"

Graph = Mapping[str, set[str]]


def package_dirs(root: Path = ROOT) -> dict[str, Path]:
    """Package name -> its directory, from pyproject's package-dir (or just ``flowcon/``)."""
    data = tomllib.loads((root / "pyproject.toml").read_text())
    dirs = data.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    out = {name: root / path for name, path in dirs.items() if name.split(".")[0] == PACKAGE}
    return out or {PACKAGE: root / PACKAGE}


def _python_files(base: Path) -> list[Path]:
    """Every ``.py`` below ``base``, following the symlinked sub-packages (flowcon/agent ->
    ../agent): pathlib's rglob does not follow symlinked directories."""
    out: list[Path] = []
    for folder, _, files in os.walk(base, followlinks=True):
        out.extend(Path(folder) / f for f in files if f.endswith(".py"))
    return sorted(out)


def module_files(dirs: Mapping[str, Path]) -> dict[str, Path]:
    """Module name -> source file, for every ``.py`` under the package directories."""
    out: dict[str, Path] = {}
    for pkg, base in dirs.items():
        # a sub-package mapped elsewhere (flowcon.agent -> agent/) is not read under flowcon/
        elsewhere = tuple(o for o in dirs if o != pkg and o.startswith(pkg + "."))
        for path in _python_files(base):
            rel = path.relative_to(base).with_suffix("").parts
            name = ".".join((pkg, *(rel[:-1] if rel[-1] == "__init__" else rel)))
            if any(name == o or name.startswith(o + ".") for o in elsewhere):
                continue
            out[name] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, at any depth, except in the body of ``if TYPE_CHECKING:``."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
            continue
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


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
            targets = [f"{base}.{alias.name}" for alias in node.names]
            targets = [t if t in modules else base for t in targets]
        for t in targets:
            found = _resolve(t, modules)
            if found is not None:
                out.add(found)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(package_dirs(root))
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


# ---------------------------------------------------------------- the finder can fail


def test_cycle_finder_on_a_tiny_graph() -> None:
    graph = {
        "a": {"b"},
        "b": {"c"},
        "c": {"a", "d"},  # a -> b -> c -> a
        "d": {"e"},
        "e": set(),
        "f": {"f"},  # imports itself
        "g": {"a"},  # reaches a cycle, is not in one
    }
    assert find_cycles(graph) == [["a", "b", "c", "a"], ["f", "f"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_lazy_imports_count_but_type_checking_does_not() -> None:
    modules = {"flowcon", "flowcon.x", "flowcon.y", "flowcon.z", "flowcon.sub", "flowcon.sub.w"}
    source = """
from typing import TYPE_CHECKING
import os
from flowcon import x
if TYPE_CHECKING:
    from flowcon.z import Thing
def later():
    from flowcon.y import thing
    from . import sub
    from .sub.w import q
"""
    found = imports_of(source, "flowcon.mod", False, modules)
    assert found == {"flowcon.x", "flowcon.y", "flowcon.sub", "flowcon.sub.w"}
    # a lazy import that closes a loop is reported as a cycle
    graph = {"flowcon.mod": found, "flowcon.y": {"flowcon.mod"}}
    assert find_cycles(graph) == [["flowcon.mod", "flowcon.y", "flowcon.mod"]]


def test_the_graph_covers_the_mapped_packages() -> None:
    graph = import_graph()
    assert "flowcon.executor.lifecycle" in graph and "flowcon.contract" in graph
    assert any(m.startswith("flowcon.agent.") for m in graph)
    assert "flowcon.agent.listeners" in graph
    assert "flowcon.executor.backend" in graph["flowcon.executor.backends.engine"]


# ---------------------------------------------------------------- the package


def test_executor_modules_import_neither_each_other_back() -> None:
    graph = import_graph()
    executor_side = {
        "flowcon.executor.workers",
        "flowcon.executor.backend",
        "flowcon.executor.profiling",
        "flowcon.executor.lifecycle",
        "flowcon.executor.backends.engine",
        "flowcon.executor.backends.swarm",
        "flowcon.executor.factory",
    }
    sub = {m: graph[m] & executor_side for m in executor_side}
    assert find_cycles(sub) == []
    backends = {"flowcon.executor.backends.engine", "flowcon.executor.backends.swarm"}
    for m in backends:
        assert "flowcon.executor.lifecycle" not in graph[m], m
    assert not graph["flowcon.executor.lifecycle"] & (backends | {"flowcon.executor.factory"})


def test_no_import_cycle_in_flowcon() -> None:
    graph = import_graph()
    cycles = find_cycles(graph)
    comps = {c[0]: c for c in strongly_connected(graph)}
    lines = [f"{' -> '.join(c)}  (all of: {', '.join(comps[c[0]])})" for c in cycles]
    assert not cycles, "import cycles:\n" + "\n".join(lines)
