"""The package's floors import one way: no module imports, at any depth, one that imports it back.

The graph is read from the source with `ast`: every import statement in a module, at module level or inside a
function (a lazy import closes a circle as surely as one at the top), relative or by the package's name.
"""

import ast
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "modeling_pointer_sentinel"


def import_graph(package: Path) -> dict[str, set[str]]:
    """Each module of the (flat) package -> the package's modules it imports; the package itself is `__init__`."""
    name, modules = package.name, {p.stem for p in package.glob("*.py")}

    def targets(module: str | None, names: list[str]) -> set[str]:
        if module:  # `from .x import y`, `from pkg.x import y`
            return {module.split(".")[0]} & modules
        # `from . import x`, `from pkg import x`: the submodules named, or else the package's __init__
        return {n for n in names if n in modules} or {"__init__"}

    graph = {}
    for path in package.glob("*.py"):
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom):
                names = [a.name for a in node.names]
                if node.level == 1:
                    edges |= targets(node.module, names)
                elif node.level == 0 and node.module and node.module.split(".")[0] == name:
                    edges |= targets(node.module.partition(".")[2] or None, names)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    top, _, rest = alias.name.partition(".")
                    if top == name:
                        edges |= targets(rest or None, [])
        graph[path.stem] = edges - {path.stem}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import circle per strongly connected group of modules (Tarjan), each as a path back to its start."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = stack[stack.index(v) :]
            del stack[stack.index(v) :]
            if len(group) > 1:
                found.append(path_around(graph, set(group)))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def path_around(graph, group: set[str]) -> list[str]:
    """A circle through the group's first module, for the message: a -> b -> ... -> a."""
    start = min(group)
    paths = [[start]]
    while paths:
        path = paths.pop(0)
        for w in sorted(graph[path[-1]] & group):
            if w == start:
                return [*path, start]
            if w not in path:
                paths.append([*path, w])
    return [start]


def test_the_package_has_no_import_circle():
    graph = import_graph(PACKAGE)
    assert {"modeling_pointer_sentinel", "generation_pointer_sentinel", "data", "training"} <= set(graph)
    found = cycles(graph)
    assert not found, "import circles: " + "; ".join(" -> ".join(c) for c in found)
    # transformers' direction: the model imports its generation utilities and cache, never the other way round
    assert "generation_pointer_sentinel" in graph["modeling_pointer_sentinel"]
    assert "data" in graph["training"]


def test_the_graph_sees_every_kind_of_import(tmp_path):
    """A circle closed by a lazy import in a function, by a relative or an absolute import, or through the package's
    __init__ is found; imports of other packages are not edges."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    files = {
        "__init__": "from .a import A\n",
        "a": "import os\nfrom .b import B\nA = 1\n",
        "b": "def f():\n    from .c import C\n",
        "c": "import pkg.a\nfrom torch import nn\n",
        "d": "from pkg import e\n",
        "e": "def g():\n    from pkg.d import D\n",
        "f": "from . import g\n",
        "g": "from pkg import A\n",
    }
    for name, code in files.items():
        (pkg / f"{name}.py").write_text(code)
    graph = import_graph(pkg)
    assert graph == {"__init__": {"a"}, "a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"e"}, "e": {"d"}, "f": {"g"},
                     "g": {"__init__"}}  # fmt: skip
    assert sorted(cycles(graph)) == [["a", "b", "c", "a"], ["d", "e", "d"]]
    graph["a"].add("f")  # a -> f -> g -> __init__ -> a
    assert ["__init__", "a", "f", "g", "__init__"] in cycles(graph)
