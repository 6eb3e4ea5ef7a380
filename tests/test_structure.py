"""The shape of the package: layers, no import cycles, plumbing private, public names.

The layer rule (docs/architecture.md): imports point down the list of LAYERS, never
up; within a layer a package imports only itself. Imports inside functions count.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import subprocess
import sys
import typing
from pathlib import Path

import pydantic

import goflux

PACKAGE = Path(goflux.__file__).resolve().parent
ROOT = PACKAGE.parent

# Modules without an underscore that are not packages: the ASGI lifespan, the pytest
# plugin (named by an entry point), and the modules of the demo application.
PUBLIC_MODULES = {"goflux.asgi", "goflux.testing.pytest_plugin"}
PUBLIC_PACKAGES_OF_MODULES = ("goflux.demo.",)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in PACKAGE.rglob("*.py")}


def syntax(path: Path) -> ast.Module:
    """``path``'s syntax tree, parsed once for the tests that read it (not to be changed)."""
    return _parsed(path.read_text())


@functools.cache
def _parsed(source: str) -> ast.Module:
    return ast.parse(source)


def imported(path: Path, name: str, known: set[str]) -> set[str]:
    """The goflux modules ``path`` imports, at any depth (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(syntax(path)):
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
    "goflux.codecs",
    "goflux.middleware",
    "goflux.service",
    "goflux.asgi",
    "goflux.asyncapi",
    "goflux.testing",
    "goflux.transports.channel",
    "goflux.transports.nats",
    "goflux.transports.jetstream",
    "goflux.transports.spark",
    "goflux.transports.http",
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


# Lowest first. Each layer holds packages (a tuple of module prefixes each); a module
# imports modules of lower layers and of its own package, nothing else.
LAYERS: tuple[tuple[tuple[str, ...], ...], ...] = (
    # the core: values, messages, the wire, interfaces, errors; the codecs
    (("goflux._", "goflux.codecs"),),
    (("goflux._otel",),),  # telemetry
    (("goflux._compose",),),  # composition: streams, processors, topics, pipes, group
    (("goflux.middleware",), ("goflux.transports",), ("goflux.testing",)),
    (("goflux.service",),),  # running services
    (("goflux",), ("goflux.asyncapi",), ("goflux.asgi",)),  # the public face; describing
    (("goflux.demo",),),  # the demo application
    (("goflux.cli", "goflux.__main__"),),  # the command line
)


def covers(prefix: str, module: str) -> bool:
    """Whether ``prefix`` names ``module``: the module itself, or one under it."""
    if prefix.endswith("_"):  # "goflux._": the core, every root module
        return module.startswith(prefix) and "." not in module[len(prefix) :]
    return module == prefix or module.startswith(prefix + ".")


def place(module: str) -> tuple[int, tuple[str, ...]]:
    """The layer and package of ``module``: the longest prefix that names it."""
    matches = [
        (len(prefix), layer, package)
        for layer, packages in enumerate(LAYERS)
        for package in packages
        for prefix in package
        if covers(prefix, module)
    ]
    assert matches, f"{module} is in no layer: add it to LAYERS"
    _, layer, package = max(matches)
    return layer, package


def test_imports_point_down_the_layers() -> None:
    found = modules()
    upward = []
    for name, path in found.items():
        layer, package = place(name)
        for target in sorted(imported(path, name, set(found))):
            target_layer, target_package = place(target)
            if target_layer > layer or (target_layer == layer and target_package != package):
                upward.append(f"{name} (layer {layer}) imports {target} (layer {target_layer})")
    assert upward == []


def test_the_layer_check_finds_an_upward_import(tmp_path: Path) -> None:
    root = tmp_path / "goflux"
    (root / "_compose").mkdir(parents=True)
    (root / "_compose" / "__init__.py").write_text("")
    (root / "_message.py").write_text("from goflux._compose.group import Group\n")
    known = {"goflux._message", "goflux._compose.group"}
    targets = imported(root / "_message.py", "goflux._message", known)
    assert targets == {"goflux._compose.group"}
    assert place("goflux._compose.group")[0] > place("goflux._message")[0]
    assert place("goflux.transports.jetstream._kv.bucket") == (3, ("goflux.transports",))
    assert place("goflux") == (5, ("goflux",))
    assert place("goflux._otel.scopes") == (1, ("goflux._otel",))
    assert place("goflux._message") == (0, ("goflux._", "goflux.codecs"))
    assert place("goflux.codecs._pipe") == (0, ("goflux._", "goflux.codecs"))


# Status codes of status messages, and JetStream API error codes.
_STATUS_TEXT = re.compile(r"^[1-5]\d\d$")
JETSTREAM = PACKAGE / "transports" / "jetstream"


def code_literals(path: Path) -> list[str]:
    """Status-code and error-code literals in ``path``'s code (docstrings left out)."""
    tree = syntax(path)
    texts = {
        id(node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
    }
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant) or id(node) in texts:
            continue
        value = node.value
        if (isinstance(value, str) and _STATUS_TEXT.match(value)) or (
            type(value) is int and (400 <= value < 600 or 10_000 <= value < 11_000)
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {value!r}")
    return found


def test_jetstream_codes_come_from_one_table() -> None:
    found = [
        literal
        for path in sorted(JETSTREAM.rglob("*.py"))
        if path.name != "_status.py"
        for literal in code_literals(path)
    ]
    assert found == [], "name the code in transports/jetstream/_status.py"


def test_the_code_check_finds_a_literal(tmp_path: Path) -> None:
    path = ROOT / "scratch_status_check.py"
    try:
        path.write_text(
            '"""Doc: 503."""\nif status == "503" or err == 10059:\n    x = data[:100]\n'
        )
        assert [line.rpartition(": ")[2] for line in code_literals(path)] == ["'503'", "10059"]
    finally:
        path.unlink()


def exported() -> dict[str, list[tuple[str, object]]]:
    """Each public package's ``__all__``: name -> [(package, object)]."""
    names: dict[str, list[tuple[str, object]]] = {}
    for package in PUBLIC_PACKAGES:
        try:
            module = importlib.import_module(package)
        except ImportError:  # an extra that is not installed
            continue
        for name in module.__all__:
            names.setdefault(name, []).append((package, getattr(module, name)))
    return names


def test_public_classes_and_functions_report_the_module_users_import() -> None:
    wrong = []
    for name, homes in exported().items():
        for package, obj in homes:
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not obj.__module__.startswith("goflux"):
                continue  # re-exported from another library
            home = obj.__module__
            if any(part.startswith("_") for part in home.split(".")[1:]):
                wrong.append(f"{package}.{name} reports {home}")
            elif getattr(sys.modules[home], obj.__qualname__, None) is not obj:
                wrong.append(f"{package}.{name}: {home}.{obj.__qualname__} is not it")
    assert wrong == []
    jetstream = importlib.import_module("goflux.transports.jetstream")
    assert goflux.Message.__module__ == "goflux"
    assert repr(goflux.Message) == "<class 'goflux.Message'>"
    assert jetstream.Subscriber.__module__ == "goflux.transports.jetstream"
    assert goflux.StreamNotFound.__module__ == "goflux.transports.jetstream"


def test_public_types_still_resolve_their_annotations() -> None:
    """Reporting a public module must not break pydantic or ``get_type_hints``.

    Annotations are strings (``from __future__ import annotations``), evaluated in the
    namespace of ``__module__``; a user's model may hold a goflux dataclass.
    """
    broken = []
    for name, homes in exported().items():
        for package, obj in homes:
            if not inspect.isclass(obj) or not obj.__module__.startswith("goflux"):
                continue
            if dataclasses.is_dataclass(obj) and not getattr(obj, "__parameters__", ()):
                try:
                    pydantic.TypeAdapter(obj).json_schema()
                except pydantic.PydanticUserError as exc:
                    broken.append(f"{package}.{name}: {exc}")
            if name in ("Delivery", "PublishReceipt", "Endpoint", "SubscriberSettings"):
                typing.get_type_hints(obj)
    assert broken == []


def test_errors_are_defined_once_under_goflux_error() -> None:
    errors: dict[str, type[BaseException]] = {}
    for name, homes in exported().items():
        for package, obj in homes:
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                assert issubclass(obj, goflux.GofluxError), f"{package}.{name} is no GofluxError"
                assert errors.setdefault(name, obj) is obj, f"{name}: another error in {package}"
    defined = [
        node.name
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(syntax(path))
        if isinstance(node, ast.ClassDef) and node.name in errors
    ]
    assert sorted(defined) == sorted(errors), "an error class is defined twice"


def test_each_transport_defines_its_own_errors() -> None:
    jetstream = importlib.import_module("goflux.transports.jetstream")
    spark = importlib.import_module("goflux.transports.spark")
    assert goflux.StreamNotFound is jetstream.StreamNotFound
    assert goflux.KeyExists.__module__ == jetstream.__name__
    assert spark.SparkError.__module__ == spark.__name__
    assert not hasattr(importlib.import_module("goflux._errors"), "StreamNotFound")


def test_optional_dependencies_load_when_used() -> None:
    code = (
        "import sys, goflux, goflux.service, goflux.asgi, goflux.asyncapi, goflux.cli;"
        "before = sorted(m for m in sys.modules if m.split('.')[0] in "
        "('nats', 'uvicorn', 'watchfiles', 'pyspark'));"
        "goflux.StreamNotFound;"
        "print(before, 'nats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True"
