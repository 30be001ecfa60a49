"""No import loops: the package's module graph, every import counted, has no cycle.

Beside :mod:`tests.test_layers` (imports point downward between layers), this checks that modules
do not import each other in a loop inside a layer either. The graph is built with the same
``ast`` walk, so an import inside a function, under ``if TYPE_CHECKING:`` or through
``importlib.import_module("...")`` is an edge too: an in-function import does not hide a loop.
An edge to a package means its ``__init__``; importing a submodule does not add an edge to its
parent package (Python runs the parent's ``__init__`` first, which only matters if that
``__init__`` imports back, and then that import is itself an edge).
"""

from __future__ import annotations

from pathlib import Path

from tests.test_layers import MODULES, ROOT, Import, imports_of


def module_of(target: str, modules: set[str]) -> str | None:
    """The package module an import target names: itself, or the longest module prefix
    (``from pkg.mod import name`` names ``pkg.mod``); None outside the package."""
    parts = target.split(".")
    while parts:
        name = ".".join(parts)
        if name in modules:
            return name
        parts.pop()
    return None


def import_graph(modules: dict[str, Path], imports: list[Import]) -> dict[str, set[str]]:
    names = set(modules)
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        if imp.target.split(".")[0] != "resumable_data":
            continue
        target = module_of(imp.target, names)
        if target is not None and target != imp.module:
            graph[imp.module].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _edges_in(component: list[str], graph: dict[str, set[str]], imports: list[Import]) -> list[str]:
    inside = set(component)
    names = set(graph)
    out = []
    for imp in imports:
        target = module_of(imp.target, names) if imp.target.startswith("resumable_data") else None
        if imp.module in inside and target in inside and target != imp.module:
            out.append(f"{MODULES[imp.module].relative_to(ROOT)}:{imp.line}: {imp.module} -> {target}")
    return sorted(set(out))


def test_the_package_has_no_import_cycle():
    imports = [imp for m, p in MODULES.items() for imp in imports_of(m, p)]
    graph = import_graph(MODULES, imports)
    loops = cycles(graph)
    shown = ["\n    ".join([" <-> ".join(c)] + _edges_in(c, graph, imports)) for c in loops]
    assert not loops, ("import loops (an in-function import counts; move the shared code into a module both "
                       "import, or pass it in):\n  " + "\n  ".join(shown))


def test_the_cycle_finder_finds_a_loop_and_only_a_loop():
    """The check can fail: a three-module loop through an in-function import is found, a chain is not."""
    loop = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(loop) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_an_in_function_import_is_an_edge(tmp_path):
    """Two modules that import each other, one of them inside a function, make a loop."""
    pkg = tmp_path / "resumable_data"
    pkg.mkdir()
    (pkg / "one.py").write_text("from resumable_data.two import g\n\ndef f():\n    return g()\n")
    (pkg / "two.py").write_text("def g():\n    from resumable_data.one import f\n    return f\n")
    modules = {"resumable_data.one": pkg / "one.py", "resumable_data.two": pkg / "two.py"}
    imports = [imp for m, p in modules.items() for imp in imports_of(m, p)]
    assert cycles(import_graph(modules, imports)) == [["resumable_data.one", "resumable_data.two"]]
