"""Find the service a ``MODULE:ATTR`` names: :func:`load_service`."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeAlias

from goflux._compose.group import Group
from goflux._errors import GofluxError

__all__ = ("Service", "ServiceLoadError", "load_service")

Service: TypeAlias = Callable[[Group], Awaitable[Any]]
"""A service: an async function that takes a :class:`~goflux.Group` and fills it.

It connects (owning its connections with ``group.own``), adds subscriptions,
processors and tasks, and returns; the runtime starts the group. What it returns is
ignored by ``goflux run`` and offered to HTTP handlers by
:class:`goflux.asgi.ServiceLifespan`.
"""


class ServiceLoadError(GofluxError, ImportError):
    """``MODULE:ATTR`` does not name an async function taking a Group."""


def load_service(spec: str, *, app_dir: str | None = ".") -> Service:
    """Import ``MODULE:ATTR`` and return the service it names.

    Args:
        spec: ``"package.module:attribute"``; the attribute may be dotted
            (``"app:services.payments"``).
        app_dir: A directory put first on ``sys.path`` (default: the current one, so
            ``examples.orders:service`` works from a checkout); None leaves the path.

    Raises:
        ServiceLoadError: The spec is malformed, the module or attribute does not
            exist, or the attribute is not an async function of one argument. An error
            raised while the module itself is imported is chained as the cause.
    """
    module_name, sep, attribute = spec.partition(":")
    if not sep or not module_name or not attribute:
        raise ServiceLoadError(f"expected MODULE:ATTR (like 'app.payments:service'), got {spec!r}")
    if app_dir is not None:
        where = os.path.abspath(app_dir)
        if where not in sys.path:
            sys.path.insert(0, where)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module_name.startswith(exc.name):
            where = f"in {os.path.abspath(app_dir)} or " if app_dir is not None else ""
            raise ServiceLoadError(
                f"no module named {module_name!r} {where}among the installed packages"
            ) from exc
        raise ServiceLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    except Exception as exc:
        raise ServiceLoadError(
            f"importing {module_name!r} failed: {type(exc).__name__}: {exc}"
        ) from exc
    target: Any = module
    for part in attribute.split("."):
        try:
            target = getattr(target, part)
        except AttributeError as exc:
            raise ServiceLoadError(
                f"module {module_name!r} has no attribute {attribute!r}"
            ) from exc
    _check_signature(spec, target)
    service: Service = target
    return service


def _check_signature(spec: str, target: object) -> None:
    if not callable(target):
        raise ServiceLoadError(f"{spec} is of type {type(target).__name__}, not an async function")
    func = target
    if not inspect.iscoroutinefunction(func) and not inspect.iscoroutinefunction(
        getattr(func, "__call__", None)  # noqa: B004 - an object with an async __call__
    ):
        raise ServiceLoadError(f"{spec} must be an async function taking a Group")
    try:
        inspect.signature(func).bind(object())
    except TypeError as exc:
        raise ServiceLoadError(f"{spec} must take exactly one argument, the Group: {exc}") from exc
    except ValueError:  # no signature to inspect (a builtin): let the call decide
        return
