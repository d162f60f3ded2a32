"""No import cycles in `localspec/` or `tui/`, counting every import the source names.

A cycle is a design smell even where Python copes with it (an import inside a function, one
under `if TYPE_CHECKING:`): the two modules are one piece split in two files, and the next
import at module level turns it into an `ImportError` at start-up. So the graph counts every
`import` and `from ... import` statement anywhere in a module: at module level, inside
functions and classes, and under `TYPE_CHECKING`.

How statements become edges:
- `import a.b.c` and `from a.b import c` name the module `a.b.c` when it is one of ours
  (`c` may be a submodule or a name defined in `a.b`; then the edge goes to `a.b`).
- Importing a submodule runs its packages' `__init__` first, so an import of `a.b.c` also
  depends on `a` and `a.b`, except the packages the importer itself lives in: those are
  already being initialized when it runs (a package's `__init__` importing its own
  submodules is not a cycle).
- `localspec/__init__.py` re-exports lazily (PEP 562 `__getattr__`; its `TYPE_CHECKING`
  block names the homes): its edges count like any other module's, so a module inside the
  package that imports a public name from `localspec` rather than from its home closes a
  cycle. Modules outside (`tui`) are meant to use `localspec`'s public names.
- Imports of modules outside `localspec` and `tui` (the standard library, llama_cpp) are
  not edges.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("localspec", "tui")


def module_files() -> dict[str, Path]:
    """Every module of ours by dotted name; a package by its `__init__.py`."""
    modules: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def _imported_names(tree: ast.AST, module: str, package: bool) -> Iterator[str]:
    """Every dotted name an import statement in `tree` may bind, relative ones resolved."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module, node.level, module, package)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names if alias.name != "*")


def _resolve(name: str | None, level: int, module: str, package: bool) -> str:
    """`from ..x import y`'s `..x` as a dotted name, seen from `module`."""
    if level == 0:
        return name or ""
    parts = module.split(".")
    here = parts if package else parts[:-1]
    base = here[: len(here) - (level - 1)]
    return ".".join([*base, name] if name else base)


def _ours(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of `name` that is one of our modules (None: not ours)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        candidate = ".".join(parts[:end])
        if candidate in modules:
            return candidate
    return None


def _with_packages(target: str, importer: str) -> Iterator[str]:
    """`target` and the packages whose `__init__` importing it runs, less `importer`'s own."""
    parts = target.split(".")
    own = importer.split(".")
    for end in range(1, len(parts) + 1):
        if parts[:end] != own[:end]:
            yield ".".join(parts[:end])


def import_graph() -> dict[str, set[str]]:
    modules = module_files()
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        edges: set[str] = set()
        for name in _imported_names(tree, module, _is_package(path)):
            target = _ours(name, modules)
            if target is not None:
                edges.update(_with_packages(target, module))
        edges.discard(module)
        graph[module] = edges
    return graph


def find_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle through each strongly connected component of more than one module
    (Tarjan's algorithm, iterative: the graph is a few hundred modules deep at most)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = set()
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.add(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        components.append(component)
            elif child not in index:
                index[child] = low[child] = len(index)
                stack.append(child)
                on_stack.add(child)
                work.append((child, iter(sorted(graph[child]))))
            elif child in on_stack:
                low[node] = min(low[node], index[child])
    return [_cycle_in(component, graph) for component in components]


def _cycle_in(component: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest cycle through the component's first module, as a path that returns to it."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & component):
                if child == start:
                    return [*paths[node], start]
                if child not in paths:
                    paths[child] = [*paths[node], child]
                    following.append(child)
        frontier = following
    raise AssertionError(f"no cycle in component {sorted(component)}")


def test_the_graph_sees_the_modules() -> None:
    """A walk that found nothing would pass vacuously."""
    graph = import_graph()
    assert "localspec.runtime" in graph
    assert "tui.app" in graph
    assert "localspec.speculative.engine" in graph["localspec.runtime"]


def test_find_cycles_reports_the_path() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []


def test_relative_imports_resolve() -> None:
    assert _resolve("x", 1, "localspec.server.app", package=False) == "localspec.server.x"
    assert _resolve("x", 1, "localspec.server", package=True) == "localspec.server.x"
    assert _resolve(None, 2, "localspec.server.app", package=False) == "localspec"


def test_no_import_cycles() -> None:
    cycles = find_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)
