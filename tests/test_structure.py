"""The package's shape: three wings whose imports point one way, no import cycles, a light library.

Wings: the library (``otel_valgen`` minus the two below) that training jobs install; the tools
(``otel_valgen.cli``, the ``otel-valgen`` command); the exporter service
(``otel_valgen.exporter``). Arrows: tools -> service (the command launches it),
tools -> library, service -> library. Every import counts, lazy ones inside functions too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator

from tests.conftest import REPO

PACKAGE = REPO / "otel_valgen"
CLI = "otel_valgen.cli"
SERVICE = "otel_valgen.exporter"
ALLOWED = {("cli", "library"), ("cli", "service"), ("service", "library")}


def _modules() -> dict[str, ast.Module]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(REPO).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = ast.parse(path.read_text(encoding="utf-8"))
    return found


def _imported(tree: ast.Module, modules: dict[str, ast.Module]) -> Iterator[str]:
    """The project modules a module imports (``from p import m`` names module m when it is one)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{alias.name}" for alias in node.names] + [node.module]
        else:
            continue
        for name in names:
            if name in modules:
                yield name


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: set(_imported(tree, modules)) - {name} for name, tree in modules.items()}


def wing(module: str) -> str:
    """The wing a module belongs to."""
    if module == CLI or module.startswith(CLI + "."):
        return "cli"
    if module == SERVICE or module.startswith(SERVICE + "."):
        return "service"
    return "library"


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return components


def test_no_import_cycles() -> None:
    """No two modules import each other, directly or through others (package __init__ aside)."""
    graph = _graph()
    # A package's __init__ re-exports its modules; a module importing its own package's public
    # names (``import otel_valgen as vg``) is not a cycle of the code's design.
    for name, targets in graph.items():
        graph[name] = {t for t in targets if not name.startswith(t + ".")}
    assert _cycles(graph) == []


def test_imports_point_one_way_between_wings() -> None:
    """The library imports neither the tools nor the service; the service does not import the tools."""
    against = sorted(
        (name, target)
        for name, targets in _graph().items()
        for target in targets
        if wing(name) != wing(target) and (wing(name), wing(target)) not in ALLOWED
    )
    assert against == []


def test_a_training_job_imports_no_cli_libraries() -> None:
    """``import otel_valgen`` with its Ray glue and verl integration loads no click, rich or zstandard."""
    code = (
        "import sys, otel_valgen, otel_valgen.ray, otel_valgen.integrations.verl, otel_valgen.testing\n"
        "print(sorted(m for m in ('click', 'rich', 'zstandard', 'wandb', 'otel_valgen.cli') if m in sys.modules))"
    )
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert loaded.stdout.strip() == "[]"


def test_the_wings_are_where_the_checks_look() -> None:
    """The checks above see each wing (a renamed package would make them pass vacuously)."""
    graph = _graph()
    assert {wing(name) for name in graph} == {"library", "cli", "service"}
    assert "otel_valgen.cli.main" in graph
    assert "otel_valgen.exporter.service" in graph


def test_the_command_without_its_extra_says_what_to_install() -> None:
    """``otel-valgen`` from a library-only install: one line naming the extra, exit 1, no traceback."""
    code = "import sys; sys.modules['click'] = None\nfrom otel_valgen.cli import main\nmain()"
    result = subprocess.run([sys.executable, "-c", code, "show"], check=False, capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 1
    assert "pip install 'otel-valgen[cli]'" in result.stderr
    assert "Traceback" not in result.stderr
