"""The static import graph of ``src/topiclake``, for the architecture test (and a CLI to print it).

What counts as an edge ``a -> b``:

- every ``import x.y`` and ``from x.y import z`` inside ``topiclake``, at any depth of the module
  (function-level, method-level and ``try`` imports count: they run, only later);
- except those under ``if TYPE_CHECKING:`` (or ``typing.TYPE_CHECKING``): they never run, so they cannot
  make a runtime cycle (mypy reads them and copes with cycles); ``type_checking=True`` counts them too;
- ``from pkg import name`` points at ``pkg.name`` when that is a submodule, else at the package ``pkg``
  itself (its ``__init__``), because that is the module whose code runs: ``from topiclake.platform import
  Broker`` imports the package ``__init__``, and through it everything the ``__init__`` re-exports;
- the implicit import of parent packages (``import topiclake.platform.broker`` first runs
  ``topiclake/platform/__init__.py``) is NOT an edge: otherwise every module that a package ``__init__``
  re-exports and that imports a sibling by its absolute name would make a cycle with its own ``__init__``,
  which Python resolves by design (the ``__init__`` is already in ``sys.modules``). Importing a name *from*
  the ``__init__`` is an edge.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = "topiclake"
SRC = Path(__file__).resolve().parents[1] / "src"


def module_files(src: Path = SRC) -> dict[str, Path]:
    """Map each module name under ``topiclake`` to its file (packages by their ``__init__.py``)."""
    out: dict[str, Path] = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _imports(tree: ast.AST, type_checking: bool) -> Iterator[ast.Import | ast.ImportFrom]:
    """Yield every import statement that can run (and those under ``if TYPE_CHECKING:`` if asked)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
            continue
        if not type_checking and isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def imports_of(module: str, path: Path, modules: set[str], type_checking: bool = False) -> set[str]:
    """The ``topiclake`` modules that ``module`` imports at run time (see the module docstring).

    With ``type_checking``, also those it imports only for the type checker.
    """
    found: set[str] = set()
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in _imports(tree, type_checking):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == ROOT or alias.name.startswith(ROOT + "."):
                    found.add(_closest(alias.name, modules))
            continue
        if node.level:
            base = _package_of(module, path)
            for _ in range(node.level - 1):
                base = base.rpartition(".")[0]
            target = f"{base}.{node.module}" if node.module else base
        else:
            target = node.module or ""
        if not (target == ROOT or target.startswith(ROOT + ".")):
            continue
        for alias in node.names:
            sub = f"{target}.{alias.name}"
            found.add(sub if sub in modules else _closest(target, modules))
    found.discard(module)
    return found


def _closest(name: str, modules: set[str]) -> str:
    while name not in modules and "." in name:
        name = name.rpartition(".")[0]
    return name


def import_graph(src: Path = SRC, type_checking: bool = False) -> dict[str, set[str]]:
    """The whole graph: module -> the modules it imports at run time (and for the type checker, if asked)."""
    files = module_files(src)
    names = set(files)
    return {mod: imports_of(mod, path, names, type_checking) for mod, path in files.items()}


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's strongly connected components with more than one module (each one or more cycles), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0

    def visit(root: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(root, iter(sorted(graph[root])))]
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
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return sorted(out)


def shortest_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """One shortest cycle through the first module of ``component``, as a path that ends where it starts."""
    members = set(component)
    start = component[0]
    parents: dict[str, str] = {}
    frontier = [start]
    seen = {start}
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(parents[path[-1]])
                    return [*reversed(path), start]
                if child not in seen:
                    seen.add(child)
                    parents[child] = node
                    following.append(child)
        frontier = following
    return [start]


def describe(graph: dict[str, set[str]], component: list[str]) -> str:
    """A component and one of its cycles, for a failure message."""
    cycle = " -> ".join(shortest_cycle(graph, component))
    return f"{len(component)} modules {component}\n    e.g. {cycle}"


if __name__ == "__main__":
    g = import_graph(type_checking="--type-checking" in sys.argv)
    comps = strongly_connected(g)
    for comp in comps:
        print(describe(g, comp))
    sys.exit(1 if comps else 0)
