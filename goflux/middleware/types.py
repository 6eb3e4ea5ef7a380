"""The shapes of goflux's own middleware: usable with handlers and publishers of any type.

Defined with the other interfaces in :mod:`goflux.interfaces`; re-exported here.
"""

from goflux.interfaces import GenericMiddleware, GenericPublisherMiddleware

__all__ = ("GenericMiddleware", "GenericPublisherMiddleware")
