"""``goflux --version``: goflux's version and those of the libraries it runs with.

Read from the installed packages' metadata: nothing is imported, so it is quick and
works on any install. A bug report that quotes it says what ran.
"""

from __future__ import annotations

import argparse
import platform
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, NoReturn

from goflux._version import __version__

__all__ = ("VersionAction", "version_text")

# The distributions whose versions matter to what goflux does, in the order shown.
DISTRIBUTIONS = ("nats-py", "pydantic", "opentelemetry-api", "opentelemetry-sdk", "pyspark")


def version_text() -> str:
    """The versions of goflux, Python, and each of :data:`DISTRIBUTIONS` (or "not installed")."""
    lines = [
        f"goflux {__version__}",
        f"Python {platform.python_version()} ({platform.python_implementation()}, {sys.platform})",
    ]
    width = max(map(len, DISTRIBUTIONS))
    for name in DISTRIBUTIONS:
        try:
            found = version(name)
        except PackageNotFoundError:
            found = "not installed"
        lines.append(f"{name:<{width}}  {found}")
    return "\n".join(lines)


class VersionAction(argparse.Action):
    """``--version``: print :func:`version_text` and exit 0.

    argparse's own ``version`` action would re-wrap the lines into one paragraph.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: Any) -> None:
        super().__init__(
            option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=kwargs.get("help")
        )

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> NoReturn:
        print(version_text(), flush=True)
        parser.exit(0)
