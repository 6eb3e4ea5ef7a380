"""MkDocs hooks for the docs site (``hooks:`` in ``mkdocs.yml``).

``mkdocs build --strict`` fails on any warning, griffe's docstring warnings included.
A docstring problem in ``goflux/`` that is known and reported, but not fixed yet, is
listed here so that the build stays usable meanwhile; every other warning still fails
it. Remove an entry once its docstring is fixed.
"""

from __future__ import annotations

import logging
from typing import Any

KNOWN_DOCSTRING_WARNINGS = (
    # goflux/middleware/wrapping.py, WrappingPublisher.publish: the "Raises:" section
    # holds a sentence, not "ExceptionType: description" (griffe drops the line).
    "Failed to get 'exception: description' pair from 'Whatever the wrapped publisher raises.'",
)


class _KnownWarnings(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(known in message for known in KNOWN_DOCSTRING_WARNINGS)


def on_startup(**kwargs: Any) -> None:
    """Let the known docstring warnings through as nothing, once per mkdocs command."""
    griffe = logging.getLogger("mkdocs.plugins.griffe")  # where mkdocstrings sends griffe's
    if not any(isinstance(f, _KnownWarnings) for f in griffe.filters):
        griffe.addFilter(_KnownWarnings())
