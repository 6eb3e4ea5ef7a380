"""What a command needs beyond goflux's core: the extras, checked before it runs.

A command whose extra is not installed prints one line naming it and exits 2, before
it imports anything of it::

    goflux run --reload needs the 'service' extra: pip install 'goflux[service]'

:data:`NEEDS` says, per command, which extras it needs and for which option (a new
command or option that imports an optional dependency adds a line there);
:func:`missing_extra` is the check ``main`` runs, and :func:`extra_of` names the extra
of a module that failed to import all the same.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.util import find_spec

__all__ = ("NEEDS", "Need", "extra_of", "missing_extra")

NATS_SERVER = "nats-server"  # not a module: a binary (goflux[server], PATH, $NATS_SERVER_BIN)


def _always(_: argparse.Namespace) -> bool:
    """A need of the command itself, whatever its options."""
    return True


@dataclass(frozen=True)
class Need:
    """An extra a command needs, the module that shows it is installed, and when.

    Attributes:
        extra: The extra of ``goflux`` that brings the module.
        module: A module it installs (:data:`NATS_SERVER`: the nats-server binary).
        option: The option that needs it (``"--reload"``), or ``""``: the command itself.
        applies: Whether the command, as called, needs it (default: always).
    """

    extra: str
    module: str
    option: str = ""
    applies: Callable[[argparse.Namespace], bool] = _always


def _embedded_server(args: argparse.Namespace) -> bool:
    """The demo starts its own nats-server unless given one."""
    return not (args.url or os.environ.get("NATS_URL"))


_NATS = (Need("nats", "nats"),)

NEEDS: dict[str, tuple[Need, ...]] = {
    "run": (
        Need("service", "uvicorn", "--health-port", lambda a: a.health_port is not None),
        Need("service", "watchfiles", "--reload", lambda a: bool(a.reload)),
        Need("service", "uvicorn", "--http-port", lambda a: a.http_port is not None),
        Need("http", "starlette", "--http-port", lambda a: a.http_port is not None),
    ),
    "asyncapi": (
        Need("asyncapi", "yaml", "--format yaml", lambda a: a.format == "yaml"),
        Need("asyncapi", "uvicorn", "--serve", lambda a: bool(a.serve)),
    ),
    "server": (Need("server", NATS_SERVER),),
    "demo": (
        *_NATS,
        Need("otel", "opentelemetry.sdk"),
        Need("spark", "pyspark"),
        Need("spark", "pyarrow"),
        Need("spark", "pandas"),
        Need("server", NATS_SERVER, applies=_embedded_server),
        Need("spark-connect", "grpc", "--remote", lambda a: bool(a.remote)),
    ),
    "streams": _NATS,
    "consumers": _NATS,
    "kv": _NATS,
    "obj": _NATS,
    "services": _NATS,
}

# The extra that brings each optional top-level module goflux imports.
_EXTRA_OF = {
    "nats": "nats",
    "pyspark": "spark",
    "pyarrow": "spark",
    "pandas": "spark",
    "grpc": "spark-connect",
    "uvicorn": "service",
    "watchfiles": "service",
    "yaml": "asyncapi",
    "opentelemetry.sdk": "otel",
}


def _installed(module: str) -> bool:
    if module == NATS_SERVER:
        from goflux.testing import NatsServerNotFound, find_nats_server  # noqa: PLC0415

        if os.environ.get("NATS_SERVER_BIN"):
            return True  # a path of the user's: if it is wrong, the server says so
        try:
            find_nats_server()
        except NatsServerNotFound:
            return False
        return True
    try:
        return find_spec(module) is not None
    except ModuleNotFoundError:  # its parent package is missing too
        return False


def _sentence(command: str, needs: Sequence[Need]) -> str:
    extras = sorted({need.extra for need in needs})
    options = sorted({need.option for need in needs})
    who = " ".join(["goflux", command, *options]) if all(options) else f"goflux {command}"
    if len(extras) == 1:
        what = f"the '{extras[0]}' extra"
    else:
        names = [f"'{extra}'" for extra in extras]
        what = f"the extras {', '.join(names[:-1])} and {names[-1]}"
    line = f"{who} needs {what}: pip install 'goflux[{','.join(extras)}]'"
    if any(need.module == NATS_SERVER for need in needs):
        line += " (or nats-server on PATH, or $NATS_SERVER_BIN set to one)"
    return line


def missing_extra(args: argparse.Namespace) -> str | None:
    """The line saying which extras ``goflux <args.command>`` lacks, or None if none."""
    needs = [
        need
        for need in NEEDS.get(args.command, ())
        if need.applies(args) and not _installed(need.module)
    ]
    return _sentence(args.command, needs) if needs else None


def extra_of(error: ImportError) -> str | None:
    """The extra that brings the module ``error`` failed to import, if it is one of ours."""
    name = error.name or ""
    for module, extra in _EXTRA_OF.items():
        if name == module or name.startswith(f"{module}."):
            return extra
    return None
