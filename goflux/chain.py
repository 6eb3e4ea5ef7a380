"""Composing handler middleware."""

from __future__ import annotations

from typing import TypeVar

from goflux.interfaces import Handler, Middleware

__all__ = ("chain",)

T = TypeVar("T")


def chain(*middlewares: Middleware[T]) -> Middleware[T]:
    """Compose middleware into one; the first given is the outermost.

    ``chain(a, b)(handler)`` is ``a(b(handler))``: ``a`` sees a message first and the
    outcome last. ``chain()`` returns the handler unchanged.
    """

    def apply(handler: Handler[T]) -> Handler[T]:
        for middleware in reversed(middlewares):
            handler = middleware(handler)
        return handler

    return apply
