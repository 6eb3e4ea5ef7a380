"""Public names report the module users import them from: :func:`publish_names`.

Classes and functions are defined in private modules (``goflux._message``) and
re-exported by a public package (``goflux``). Each package's ``__init__`` calls
:func:`publish_names` once its ``__all__`` is complete, so that ``repr``, tracebacks,
documentation tools and pickle name ``goflux.Message``, not
``goflux._message.Message``. The first public package to export a name is its home:
``goflux`` before ``goflux.middleware``, whose ``__init__`` runs after it.
"""

from __future__ import annotations

import contextlib
import inspect
import sys
from collections.abc import Mapping
from typing import ForwardRef, cast

__all__ = ("publish_names",)


def _private(module: str) -> bool:
    head, _, rest = module.partition(".")
    return head == "goflux" and any(part.startswith("_") for part in rest.split("."))


def _resolve_annotations(cls: type) -> None:
    """Evaluate ``cls``'s own string annotations where they were written.

    ``from __future__ import annotations`` keeps annotations (and a dataclass's field
    types) as strings, which pydantic and ``typing.get_type_hints`` evaluate in the
    namespace of ``cls.__module__``: once
    that is the public package, the names the defining module imported (``datetime``,
    ``Mapping``, ...) would be missing there. Annotations that name what is imported
    only for type checkers stay strings.
    """
    own = inspect.get_annotations(cls)
    texts = {
        name: value.__forward_arg__ if isinstance(value, ForwardRef) else value
        for name, value in own.items()
        if isinstance(value, str | ForwardRef)  # a TypedDict keeps ForwardRefs
    }
    if not texts:
        return
    module_globals = vars(sys.modules[cls.__module__])
    class_locals = {**vars(cls), cls.__name__: cls}
    for name, text in texts.items():
        # What inspect.get_annotations(eval_str=True) does, one annotation at a time:
        # the strings are this package's own source.
        with contextlib.suppress(NameError, AttributeError, TypeError, SyntaxError):
            own[name] = eval(text, module_globals, class_locals)
    cls.__annotations__ = own
    for field in getattr(cls, "__dataclass_fields__", {}).values():  # what pydantic reads
        if isinstance(field.type, str) and field.name in own:
            field.type = own[field.name]


def publish_names(package: str, namespace: Mapping[str, object]) -> None:
    """Make each class and function in ``namespace["__all__"]`` report ``package``.

    Only names still reporting a private module change (so a name exported by two
    packages keeps the first); constants and type aliases are left as they are.
    Names ``__all__`` lists but the namespace lacks (loaded on first use) are
    skipped: their own package publishes them.
    """
    for name in cast("tuple[str, ...]", namespace["__all__"]):
        obj = namespace.get(name)
        if not (inspect.isclass(obj) or inspect.isfunction(obj)):
            continue
        if not _private(obj.__module__):
            continue
        if inspect.isclass(obj):
            _resolve_annotations(obj)
        obj.__module__ = package
