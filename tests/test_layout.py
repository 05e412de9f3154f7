"""The package's modules import one another one way: no module reaches back to one that imports it, even
for type hints, so the core (outcome, conventions, telemetry) reads from the bottom up."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "src" / "otel_mcp_cancel"


def imports_of(path: Path) -> set[str]:
    """The package's modules that `path` imports, by dotted name below the package."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("otel_mcp_cancel"):
            module = node.module.removeprefix("otel_mcp_cancel").lstrip(".")
            if module:  # `from otel_mcp_cancel.hooks import wrapping` names a module too
                found |= {module} | {f"{module}.{alias.name}" for alias in node.names}
            else:  # `from otel_mcp_cancel import tool_registry`
                found |= {alias.name for alias in node.names}
    return found


def test_the_package_has_no_import_cycle() -> None:
    modules = {str(path.relative_to(PACKAGE).with_suffix("")).replace("/", "."): path for path in PACKAGE.rglob("*.py")}
    modules = {name.removesuffix(".__init__"): path for name, path in modules.items()}
    graph = {name: {other for other in imports_of(path) if other in modules and other != name}
             for name, path in modules.items() if name != "__init__"}
    try:
        tuple(TopologicalSorter(graph).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import cycle: {cycle.args[1]}") from None
    assert graph["task_telemetry"] >= {"ghost_reporting"} and "server_telemetry" not in graph["task_telemetry"]
