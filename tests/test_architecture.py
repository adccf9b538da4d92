"""The floor plan holds: no import circles, no import up a floor, every module on the map.

Imports are read from the source (``ast``), all of them: at the top, inside functions,
and under ``TYPE_CHECKING`` — a circle closed by a lazy or a type-only import is still
a circle to a reader.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("triage", "loadtests", "gateway", "scheduler", "simulator")
MAX_LINES = 400  # split a module before it grows past this

# Floors, top first: a module may import its own floor's and those below, never one above.
# Each entry is a module or a package prefix; the longest prefix that matches decides.
FLOORS: list[tuple[str, ...]] = [
    ("triage",),
    ("loadtests",),
    ("gateway.serve",),
    ("gateway.app",),
    ("gateway.api",),
    ("gateway.request",),
    ("gateway.server", "gateway.telemetry", "gateway.upstream", "gateway.settings"),
    ("gateway.errors", "gateway.schemas", "gateway.sse", "gateway"),
    ("scheduler.service",),
    ("scheduler.job",),
    ("scheduler.quotas", "scheduler.queue", "scheduler.backends", "scheduler.predictor", "scheduler.tasks"),
    ("scheduler.policy",),
    ("scheduler.types", "scheduler.errors", "scheduler"),
    ("simulator",),
]


def modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def imports(path: Path, known: dict[str, Path]) -> set[str]:
    """The product modules ``path`` imports, wherever in it the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in known else node.module)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return {m for m in found if m in known}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports(path, known) - {name} for name, path in known.items()}


def floor(module: str) -> int:
    best, best_len = None, -1
    for index, entries in enumerate(FLOORS):
        for prefix in entries:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    assert best is not None, f"{module} is on no floor"
    return best


def test_no_module_imports_in_a_circle() -> None:
    g = graph()
    seen: dict[str, int] = {}  # 1: on the current path, 2: done
    circles: list[list[str]] = []

    def visit(node: str, path: list[str]) -> None:
        seen[node] = 1
        for dep in sorted(g[node]):
            if seen.get(dep) == 1:
                circles.append(path[path.index(dep):] + [dep])
            elif dep not in seen:
                visit(dep, [*path, dep])
        seen[node] = 2

    for name in sorted(g):
        if name not in seen:
            visit(name, [name])
    assert circles == []


def test_no_module_imports_a_floor_above_its_own() -> None:
    up = [
        f"{name} -> {dep}"
        for name, deps in sorted(graph().items())
        for dep in sorted(deps)
        if floor(dep) < floor(name) and not name.startswith("simulator")
    ]
    assert up == []


def test_the_simulator_stands_alone() -> None:
    g = graph()
    assert [f"{n} -> {d}" for n, ds in g.items() if n.startswith("simulator") for d in ds
            if not d.startswith("simulator")] == []


def test_every_product_module_is_on_the_map() -> None:
    """docs/architecture.md names every module: by its path, or by its file name in the
    row of its folder in the map's table."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([\w/]+\.py)`", text))
    for row in re.findall(r"^\| `([\w/]+)/` \|(.*)$", text, flags=re.MULTILINE):
        folder, cells = row
        named.update(f"{folder}/{name}" for name in re.findall(r"`([\w]+\.py)`", cells))
    missing = [
        rel for path in modules().values()
        if path.name != "__init__.py" and (rel := path.relative_to(ROOT).as_posix()) not in named
    ]
    assert missing == []


def test_no_module_is_over_the_line_limit() -> None:
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert long == {}


def test_the_gateways_top_level_holds_only_what_a_newcomer_opens_first() -> None:
    top = sorted(p.name for p in (ROOT / "gateway").glob("*.py") if p.name != "__init__.py")
    assert len(top) <= 10, top


UNIT_TESTS_EXCLUDE = ("e2e", "engines", "robustness")  # whole servers and real engines, not unit tests


def test_every_product_module_is_imported_by_a_unit_test() -> None:
    """Each module has a test of its own outside the end-to-end folders: imports read with
    ``ast`` (inside functions too), and ``import_module``/``run_module`` of a literal name."""
    imported: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        if path.relative_to(ROOT / "tests").parts[0] in UNIT_TESTS_EXCLUDE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module)
                imported.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and getattr(node.func, "attr", getattr(node.func, "id", "")) in ("import_module", "run_module")):
                imported.add(str(node.args[0].value))
    missing = [
        name for name, path in sorted(modules().items())
        if name not in imported
        and not (path.name == "__init__.py" and any(i.startswith(name + ".") for i in imported))
    ]
    assert missing == []
