"""No two modules of ``loadtests`` import each other, even through others: every import
counts, at the top, inside a function or under ``TYPE_CHECKING``, since a circle closed
lazily still ties the modules together (and breaks as soon as someone hoists it)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "loadtests"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """Module -> the package's modules it imports anywhere in its text."""
    modules = {module_name(p): p for p in (ROOT / PACKAGE).rglob("*.py")}

    def owner(name: str) -> str | None:  # "loadtests.compare.X" -> "loadtests.compare"
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        found: set[str | None] = set()
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {owner(a.name) for a in node.names}
            elif isinstance(node, ast.ImportFrom):
                base = package
                for _ in range(node.level - 1):
                    base = base.rpartition(".")[0]
                source = (f"{base}.{node.module}" if node.module else base) if node.level else node.module or ""
                # "from loadtests import stack" imports the module loadtests.stack
                found |= {f"{source}.{a.name}" if f"{source}.{a.name}" in modules else owner(source)
                          for a in node.names}
        graph[name] = {m for m in found if m is not None and m != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_checker_finds_circles_and_reads_every_kind_of_import() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "loadtests.compare_runs" in graph["loadtests.engines.bench"]
    assert "loadtests.compare" in graph["loadtests.cli"]  # imported inside run_compare()
    assert "loadtests.stack" in graph["loadtests.chaos.stack"]  # "from loadtests import stack"


def test_no_module_of_loadtests_imports_in_a_circle() -> None:
    assert cycles(import_graph()) == []
