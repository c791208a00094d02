"""No import cycle anywhere in the ``flowcon`` package, and the layers import only downwards
(pure: reads the sources with ``ast``).

How the graph is read (what counts as an import, what a cycle is):
``flowcon.testing.import_graph``.

The layer contract (``LAYERS``): the pure cores (``flowcon.core``, the agent's decisions, and
``flowcon.alloc``, the allocator's policy) import nothing but themselves and
``flowcon.contract``, so no service, engine, simulator or other I/O package; the simulator
never imports the live service; the papers' baselines and the reproductions build on
``flowcon.alloc``, which never imports them.
"""

from __future__ import annotations

import ast

from flowcon.testing.import_graph import (
    PACKAGE,
    ROOT,
    Graph,
    find_cycles,
    import_graph,
    imports_of,
    strongly_connected,
)

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


def test_lazy_and_type_checking_imports_count() -> None:
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
    assert found == {
        "flowcon",  # from flowcon import x: the package's namespace is read
        "flowcon.x",
        "flowcon.y",
        "flowcon.z",
        "flowcon.sub",
        "flowcon.sub.w",
    }
    # a lazy import that closes a loop is reported as a cycle
    graph = {"flowcon.mod": found, "flowcon.y": {"flowcon.mod"}}
    assert find_cycles(graph) == [["flowcon.mod", "flowcon.y", "flowcon.mod"]]


def test_a_package_importing_its_own_submodules_is_no_self_loop() -> None:
    modules = {"flowcon", "flowcon.pkg", "flowcon.pkg.sub"}
    found = imports_of("from flowcon.pkg import sub", "flowcon.pkg", True, modules)
    assert found == {"flowcon.pkg.sub"}
    # from a module that is not the package, the same line is an edge to both
    found = imports_of("from flowcon.pkg import sub", "flowcon.other", False, modules)
    assert found == {"flowcon.pkg", "flowcon.pkg.sub"}


def test_the_graph_covers_every_package() -> None:
    graph = import_graph()
    assert "flowcon.executor.lifecycle" in graph
    assert "flowcon.contract" in graph
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
        "flowcon.executor.stopfree_plan",
        "flowcon.executor.executor_base",
        "flowcon.executor.restart",
        "flowcon.executor.stopfree_rescale",
        "flowcon.executor.reconcile",
        "flowcon.executor.job_logs",
        "flowcon.executor.lifecycle",
        "flowcon.executor.backends.engine",
        "flowcon.executor.backends.swarm",
        "flowcon.executor.factory",
    }
    sub = {m: graph[m] & executor_side for m in executor_side}
    assert find_cycles(sub) == []
    backends = {"flowcon.executor.backends.engine", "flowcon.executor.backends.swarm"}
    executor_parts = executor_side - backends - {"flowcon.executor.factory"}
    for m in backends:
        assert "flowcon.executor.lifecycle" not in graph[m], m
    for m in executor_parts:  # the Executor and its parts never import a backend
        assert not graph[m] & (backends | {"flowcon.executor.factory"}), m


def _cycle_report(graph: Graph, skip: frozenset[frozenset[str]] = frozenset()) -> list[str]:
    comps = {c[0]: c for c in strongly_connected(graph)}
    return [
        f"{' -> '.join(c)}  (all of: {', '.join(comps[c[0]])})"
        for c in find_cycles(graph)
        if frozenset(comps[c[0]]) not in skip
    ]


def test_no_import_cycle_in_flowcon() -> None:
    lines = _cycle_report(import_graph())
    assert not lines, "import cycles:\n" + "\n".join(lines)


def test_elastic_submodules_never_import_the_package() -> None:
    """``flowcon.elastic``'s ``__init__`` imports its submodules (``main``, the re-exports);
    a submodule imports the module that defines a name (``import flowcon.elastic.state``),
    never ``from flowcon.elastic import ...`` or ``from flowcon import elastic``, so the
    package and its submodules do not import each other."""
    bad = []
    for path in sorted((ROOT / "flowcon" / "elastic").glob("*.py")):
        if path.name == "__init__.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0:
                names = {a.name for a in node.names}
                if node.module == "flowcon.elastic" or (
                    node.module == "flowcon" and "elastic" in names
                ):
                    bad.append(f"{path.name}:{node.lineno}")
            elif isinstance(node, ast.Import) and any(
                a.name == "flowcon.elastic" for a in node.names
            ):
                bad.append(f"{path.name}:{node.lineno}")
    assert not bad, bad


# ---------------------------------------------------------------- the layers

# packages that talk to the world (Docker, HTTP, files, processes) or are the service
SERVICE_AND_IO = (
    "flowcon.agent",
    "flowcon.allocator",
    "flowcon.client",
    "flowcon.elastic",
    "flowcon.engine",
    "flowcon.executor",
    "flowcon.replay",
    "flowcon.sim",
    "flowcon.web",
)
# importer package -> the packages/modules it may import (None: any but FORBIDDEN's)
ALLOWED: dict[str, tuple[str, ...]] = {
    "flowcon.core": ("flowcon.core", "flowcon.contract"),
    "flowcon.alloc": ("flowcon.alloc",),
}
# importer package -> the packages/modules it must not import, and why
FORBIDDEN: dict[str, tuple[tuple[str, ...], str]] = {
    "flowcon.core": (SERVICE_AND_IO, "the agent's pure core"),
    "flowcon.alloc": (
        (*SERVICE_AND_IO, "flowcon.baselines", "flowcon.repro", "flowcon.policy_registry"),
        "the allocator's pure policy; baselines and reproductions build on it",
    ),
    "flowcon.sim": (
        ("flowcon.agent", "flowcon.allocator", "flowcon.client", "flowcon.executor"),
        "the simulator runs the policies, never the live service",
    ),
    "flowcon.baselines": (
        (*SERVICE_AND_IO, "flowcon.repro", "flowcon.policy_registry"),
        "pure policies beside flowcon.alloc",
    ),
    "flowcon.repro": (
        ("flowcon.agent", "flowcon.allocator", "flowcon.client", "flowcon.executor"),
        "reproductions run in the simulator, not in the service",
    ),
}


def _under(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def layer_violations(graph: Graph) -> list[str]:
    """``importer -> imported (rule)`` for every edge the layer contract forbids."""
    out: list[str] = []
    for mod in sorted(graph):  # the root package ``flowcon`` runs first anyway: no layer
        for pkg, (banned, why) in FORBIDDEN.items():
            if not _under(mod, (pkg,)):
                continue
            allowed = ALLOWED.get(pkg)
            for dep in sorted(graph[mod] - {PACKAGE}):
                if _under(dep, banned) or (allowed is not None and not _under(dep, allowed)):
                    out.append(f"{mod} -> {dep}  ({pkg}: {why})")
    return out


def test_layer_check_on_a_tiny_graph() -> None:
    graph = {
        "flowcon.alloc.policy": {"flowcon.alloc.model", "flowcon.baselines.static"},
        "flowcon.alloc.model": {"flowcon.textfile"},  # not in alloc's allowed list
        "flowcon.core.labels": {"flowcon.contract", "flowcon.core.lists"},
        "flowcon.sim.engine": {"flowcon.alloc.policy", "flowcon.allocator.planner"},
        "flowcon.repro.published_policies": {"flowcon.alloc.policy", "flowcon.sim.engine"},
        "flowcon.allocator.planner": {"flowcon.sim.engine"},  # not a rule of this contract
    }
    found = [line.split("  (")[0] for line in layer_violations(graph)]
    assert found == [
        "flowcon.alloc.model -> flowcon.textfile",
        "flowcon.alloc.policy -> flowcon.baselines.static",
        "flowcon.sim.engine -> flowcon.allocator.planner",
    ]


def test_the_layers_import_only_downwards() -> None:
    bad = layer_violations(import_graph())
    assert not bad, "layer contract broken:\n" + "\n".join(bad)


# what images/elastic-example/build.sh stages beside the training script: the runtime's
# own imports of flowcon must stay inside it, or the image's jobs fail at import
ELASTIC_IMAGE_CARRIES = (
    "flowcon.elastic",
    "flowcon.contract",
    "flowcon.report",
    "flowcon.core.batch_search",
)


def test_the_elastic_runtime_imports_only_what_its_image_carries() -> None:
    graph = import_graph()
    outside = sorted(
        f"{mod} -> {dep}"
        for mod, deps in graph.items()
        if _under(mod, ("flowcon.elastic",))
        for dep in deps
        if dep != "flowcon" and not _under(dep, ELASTIC_IMAGE_CARRIES)
    )
    assert not outside, "flowcon.elastic imports what its image does not carry:\n" + "\n".join(
        outside
    )
    from pathlib import Path

    build = (Path(__file__).resolve().parents[1] / "images/elastic-example/build.sh").read_text()
    for module in ELASTIC_IMAGE_CARRIES:
        path = module.replace(".", "/")
        staged = f"flowcon/{path.split('/', 1)[1]}" if "/" in path else path
        assert f"$REPO/{staged}" in build or f'$REPO"/{staged}' in build, (
            f"build.sh does not copy {module} into the image"
        )
