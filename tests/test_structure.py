"""The shape of the package: no import cycles, plumbing private, public names in packages."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import goflux

PACKAGE = Path(goflux.__file__).resolve().parent
ROOT = PACKAGE.parent

# Modules without an underscore that are not packages: the command line, the
# pytest plugin (named by an entry point), and the modules of the demo
# application.
PUBLIC_MODULES = {"goflux.asgi", "goflux.cli", "goflux.testing.pytest_plugin"}
PUBLIC_PACKAGES_OF_MODULES = ("goflux.demo.",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The goflux modules ``path`` imports, at any depth (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        targets.update(n for n in names if n in known and n != name)
    if path.name == "__init__.py":  # a package re-exporting its own modules is no cycle
        targets = {t for t in targets if not t.startswith(name + ".")}
    return targets


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

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
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_even_through_imports_inside_functions() -> None:
    found = modules()
    graph = {name: imported(path, name, set(found)) for name, path in found.items()}
    assert cycles(graph) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_plumbing_is_private() -> None:
    public = {
        name
        for name, path in modules().items()
        if path.name != "__init__.py"
        and not any(part.startswith("_") for part in name.split(".")[1:])
        and not name.startswith(PUBLIC_PACKAGES_OF_MODULES)
    }
    assert public == PUBLIC_MODULES, "a new module is public; name it _module.py"


PUBLIC_PACKAGES = (
    "goflux",
    "goflux.middleware",
    "goflux.service",
    "goflux.asgi",
    "goflux.asyncapi",
    "goflux.testing",
    "goflux.transports.channel",
    "goflux.transports.nats",
    "goflux.transports.jetstream",
    "goflux.transports.spark",
)
CROSS_REFERENCE = re.compile(r":(func|class|exc|meth|attr|data):`~?(goflux(?:\.\w+)+)`")


def test_docstrings_refer_to_public_names_by_their_public_path() -> None:
    exported: dict[str, str] = {}
    for package in PUBLIC_PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError:  # an extra that is not installed
            continue
        for name in module.__all__:
            exported.setdefault(name, package)
    wrong = []
    for name, path in modules().items():
        for role, target in CROSS_REFERENCE.findall(path.read_text()):
            parts = target.split(".")
            private = any(part.startswith("_") for part in parts[1:-1])
            if target.rpartition(".")[2].startswith("_") and role in ("func", "class", "exc"):
                wrong.append(f"{name}: {target} is a module, not a {role}")
            elif private and parts[-1] in exported:
                wrong.append(f"{name}: {target} is public as {exported[parts[-1]]}.{parts[-1]}")
    assert not wrong, wrong
