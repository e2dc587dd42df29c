"""The import graph of a package, for the layering tests (tests/test_layers.py).

Reads sources with :mod:`ast` (nothing is imported): every ``import`` and ``from ...
import`` of the package's own modules, at module level or inside a function, except
those under ``if TYPE_CHECKING:`` (types only, never run).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``line``; ``local``: inside a function."""

    source: str
    target: str
    line: int
    local: bool


def module_sources(root: Path, package: str) -> dict[str, str]:
    """Module name -> source text of every module under ``root`` (the package dir)."""
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path.read_text()
    return out


def edges(sources: Mapping[str, str], package: str) -> list[Edge]:
    """Every import of one of ``sources``' modules by another."""
    found: dict[tuple[str, str, int], Edge] = {}
    for name, text in sources.items():
        tree = ast.parse(text)
        is_package = _is_package(name, sources)
        for node, local in _imports(tree):
            for target in _targets(node, name, is_package):
                owner = _owner(target, sources)
                # every module imports its ancestor packages (the root's lazy API too):
                # an edge to one says nothing
                if owner and owner != name and not name.startswith(owner + ".") \
                        and owner != package and owner.startswith(package):
                    found.setdefault((name, owner, node.lineno),
                                     Edge(name, owner, node.lineno, local))
    return list(found.values())


def cycles(found: Iterable[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (import cycles)."""
    graph: dict[str, set[str]] = {}
    for e in found:
        graph.setdefault(e.source, set()).add(e.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan; the graphs here are a few hundred nodes
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _is_package(name: str, sources: Mapping[str, str]) -> bool:
    return any(other.startswith(name + ".") for other in sources)


def _imports(tree: ast.AST) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
    """(import node, inside a function), skipping ``if TYPE_CHECKING:`` blocks."""
    def walk(node: ast.AST, local: bool) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child.test):
                yield from (pair for c in child.orelse for pair in walk_one(c, local))
                continue
            yield from walk_one(child, local)

    def walk_one(node: ast.AST, local: bool) -> Iterable[tuple[ast.Import | ast.ImportFrom, bool]]:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, local
            return
        inner = local or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        yield from walk(node, inner)

    return walk(tree, False)


def _type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = name.split(".") if is_package else name.split(".")[:-1]
        parts = parts[:len(parts) - (node.level - 1)]
        base = ".".join(parts + ([base] if base else []))
    return [f"{base}.{alias.name}" for alias in node.names] + [base]


def _owner(target: str, sources: Mapping[str, str]) -> str:
    """The module of ``sources`` that ``target`` names (a name in a module: the module)."""
    while target and target not in sources:
        target = target.rpartition(".")[0]
    return target
