"""The public surface: names from DESIGN.md, complete __all__, docstrings everywhere."""

from __future__ import annotations

import importlib
import importlib.resources
import inspect
import pkgutil
import subprocess
import sys
from types import ModuleType

import goflux

DESIGN_CORE_NAMES = {
    "Message", "Headers", "Delivery", "Publisher", "Subscriber", "Requester", "Responder",
    "Handler", "Middleware", "chain", "Codec", "JsonCodec", "BytesCodec", "StrCodec",
    "Telemetry", "PublishReceipt", "GofluxError", "PublishError", "SubscribeError",
    "EncodeError", "DecodeError", "TransportError", "RequestTimeout", "NonRetryable",
    "bind_publisher", "bind_subscriber", "Topic", "process", "micro_batches", "pipe",
    "pipe_map", "pipe_flat_map", "Group",
}  # fmt: skip


def modules() -> list[ModuleType]:
    found = [goflux]
    found.extend(
        importlib.import_module(info.name)
        for info in pkgutil.walk_packages(goflux.__path__, "goflux.")
    )
    return found


def test_design_names_are_exported_from_goflux() -> None:
    assert isinstance(goflux.__all__, tuple)
    assert set(goflux.__all__) >= DESIGN_CORE_NAMES
    for name in goflux.__all__:
        assert hasattr(goflux, name), name


def test_every_module_has_a_complete_tuple_all() -> None:
    for module in modules():
        exported = getattr(module, "__all__", None)
        assert isinstance(exported, tuple), f"{module.__name__} lacks a tuple __all__"
        for name in exported:
            assert hasattr(module, name), f"{module.__name__}.__all__ names missing {name}"
        defined_here = {
            name
            for name, obj in vars(module).items()
            if not name.startswith("_")
            and (inspect.isclass(obj) or inspect.isfunction(obj))
            and obj.__module__ == module.__name__
        }
        missing = defined_here - set(exported)
        assert not missing, f"{module.__name__} defines public names not in __all__: {missing}"


def test_every_public_name_and_method_has_a_docstring() -> None:
    undocumented: list[str] = []
    for module in modules():
        if not module.__doc__:
            undocumented.append(module.__name__)
        for name in module.__all__:
            obj = getattr(module, name)
            if not (inspect.isclass(obj) or inspect.isfunction(obj)):
                continue
            if not inspect.getdoc(obj):
                undocumented.append(f"{module.__name__}.{name}")
            if inspect.isclass(obj) and obj.__module__.startswith("goflux"):
                for attr, member in vars(obj).items():
                    if attr.startswith("_") or not (
                        inspect.isfunction(member) or isinstance(member, property)
                    ):
                        continue
                    if not inspect.getdoc(member):
                        undocumented.append(f"{module.__name__}.{name}.{attr}")
    assert not undocumented, undocumented


def test_the_core_imports_neither_nats_nor_spark() -> None:
    code = (
        "import sys, goflux, goflux.transports.channel, goflux.middleware;"
        "bad = [m for m in sys.modules if m.split('.')[0] in ('nats', 'pyspark')];"
        "print(bad)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_py_typed_is_shipped() -> None:
    assert (importlib.resources.files("goflux") / "py.typed").is_file()
