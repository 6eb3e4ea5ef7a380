"""griffe extensions for the docs site's API reference (``mkdocs.yml`` loads them).

``SphinxRoles``: goflux's reST markup in docstrings, as Markdown. The docstrings are
Google style but cross-reference with Sphinx roles (``:func:`process```,
``:class:`~goflux.NonRetryable```) and introduce code with reST's ``::``. mkdocstrings
renders Markdown, where both would show literally. Before the docstrings are parsed,
this extension turns

- a role into an optional cross-reference: a link when the target is on the site
  (names are resolved in the docstring's own scope, as Sphinx does), plain code
  otherwise, never a build warning;
- ``text::`` followed by an indented block into ``text:`` and a fenced code block
  (Python when the block compiles as Python, plain text otherwise).

Loaded by ``mkdocs.yml`` (``plugins: mkdocstrings: handlers: python: options:
extensions``); goflux itself does not import this module.
"""

from __future__ import annotations

import ast
import re
import textwrap
from typing import Any

import griffe

ROLE = re.compile(r":(?:py:)?(?:func|meth|class|attr|exc|mod|data|obj|const):`(~?)([^`]+)`")
LITERAL = re.compile(
    r"^(?P<text>[^\n]*?)::[ \t]*\n(?:[ \t]*\n)+(?P<code>(?:(?:[ \t]+\S[^\n]*)?\n)+)", re.MULTILINE
)


def _identifier(obj: griffe.Object, target: str) -> str:
    """Return the full path ``target`` names, seen from ``obj``'s docstring."""
    if target.startswith("goflux."):
        return target
    head, _, rest = target.lstrip(".").partition(".")
    try:
        path = obj.resolve(head)
    except griffe.NameResolutionError:
        return target.lstrip(".")
    return f"{path}.{rest}" if rest else path


def _role(obj: griffe.Object, match: re.Match[str]) -> str:
    short, target = match[1], match[2].strip()
    shown = target.rsplit(".", 1)[-1] if short else target.lstrip(".")
    return (
        f'<autoref identifier="{_identifier(obj, target)}" optional><code>{shown}</code></autoref>'
    )


def _is_python(code: str) -> bool:
    try:
        compile(code, "<docstring>", "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    except SyntaxError:
        return False
    return True


def _literal(match: re.Match[str]) -> str:
    text, code = match["text"], textwrap.dedent(match["code"]).strip("\n")
    if text.strip() and not text[-1].isspace():
        text += ":"  # "as in Go::" reads "as in Go:"; a lone "::" or "word ::" drops it
    language = "python" if _is_python(code) else "text"
    return f"{text.rstrip()}\n\n```{language}\n{code}\n```\n\n"


def markdown(obj: griffe.Object, text: str) -> str:
    """Return the docstring ``text`` of ``obj`` with its reST markup turned into Markdown."""
    text = LITERAL.sub(_literal, text + "\n").strip("\n")
    return ROLE.sub(lambda m: _role(obj, m), text)


class SphinxRoles(griffe.Extension):
    """Rewrite every docstring of the loaded package before mkdocstrings renders it."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Visit every object of goflux once it is loaded (other packages: untouched)."""
        if pkg.name == "goflux":
            self._visit(pkg)

    def _visit(self, obj: griffe.Object) -> None:
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj, obj.docstring.value)
        for member in obj.members.values():
            if not member.is_alias:
                self._visit(member)  # type: ignore[arg-type]
