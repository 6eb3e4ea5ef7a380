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
# The libraries of goflux.codecs (the extra ``codecs``), shown in a group of their own
# and only those installed: each is needed by one codec alone.
CODEC_DISTRIBUTIONS = (
    "ormsgpack",
    "msgpack",
    "ruamel.yaml",
    "tomli-w",
    "defusedxml",
    "backports.zstd",
    "brotli",
    "cramjam",
)
_INDENT = "  "


def _installed(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def version_text() -> str:
    """The versions of goflux, Python, each of :data:`DISTRIBUTIONS` (or "not installed").

    Then a ``codecs`` group: the installed ones of :data:`CODEC_DISTRIBUTIONS`, indented
    (``none installed`` if there are none).
    """
    lines = [
        f"goflux {__version__}",
        f"Python {platform.python_version()} ({platform.python_implementation()}, {sys.platform})",
    ]
    codecs = [(name, found) for name in CODEC_DISTRIBUTIONS if (found := _installed(name))]
    width = max(
        *map(len, DISTRIBUTIONS), *(len(_INDENT + name) for name, _ in codecs), len("codecs")
    )
    lines.extend(
        f"{name:<{width}}  {_installed(name) or 'not installed'}" for name in DISTRIBUTIONS
    )
    lines.append(f"{'codecs':<{width}}  {'' if codecs else 'none installed'}".rstrip())
    lines.extend(f"{_INDENT + name:<{width}}  {found}" for name, found in codecs)
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
