"""Composing handler and publisher middleware."""

from __future__ import annotations

from typing import TypeVar, overload

from goflux._interfaces import (
    GenericMiddleware,
    GenericPublisherMiddleware,
    Handler,
    Middleware,
    Publisher,
    PublisherMiddleware,
)

__all__ = ("chain", "chain_publishers")

T = TypeVar("T")


@overload
def chain(*middlewares: GenericMiddleware) -> GenericMiddleware: ...
@overload
def chain(*middlewares: Middleware[T]) -> Middleware[T]: ...
def chain(*middlewares: Middleware[T]) -> Middleware[T]:
    """Compose middleware into one; the first given is the outermost.

    ``chain(a, b)(handler)`` is ``a(b(handler))``: ``a`` sees a message first and the
    outcome last. ``chain()`` returns the handler unchanged. Composing only generic
    middleware (goflux's own) gives generic middleware again.
    """

    def apply(handler: Handler[T]) -> Handler[T]:
        for middleware in reversed(middlewares):
            handler = middleware(handler)
        return handler

    return apply


@overload
def chain_publishers(*middlewares: GenericPublisherMiddleware) -> GenericPublisherMiddleware: ...
@overload
def chain_publishers(*middlewares: PublisherMiddleware[T]) -> PublisherMiddleware[T]: ...
def chain_publishers(*middlewares: PublisherMiddleware[T]) -> PublisherMiddleware[T]:
    """Compose publisher middleware into one; the first given is the outermost.

    ``chain_publishers(a, b)(publisher)`` is ``a(b(publisher))``: ``a`` sees each
    publish first and its outcome last. ``chain_publishers()`` returns the publisher
    unchanged. Composing only generic middleware gives generic middleware again.
    """

    def apply(publisher: Publisher[T]) -> Publisher[T]:
        for middleware in reversed(middlewares):
            publisher = middleware(publisher)
        return publisher

    return apply
