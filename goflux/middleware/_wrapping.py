"""The base of publisher middleware: a publisher that owns the publisher it wraps."""

from __future__ import annotations

from typing import Generic, TypeVar

from goflux._facts import Facts, facts_of
from goflux._headers import HeadersLike
from goflux._interfaces import Publisher
from goflux._lifecycle import CloseOnExit
from goflux._receipt import PublishReceipt

__all__ = ("WrappingPublisher",)

T = TypeVar("T")


class WrappingPublisher(CloseOnExit, Generic[T]):
    """A publisher around ``inner``: publishing passes through, closing closes ``inner``.

    Subclasses override :meth:`publish` to add behaviour around ``self._inner``.
    """

    __slots__ = ("_inner",)

    def __init__(self, inner: Publisher[T]) -> None:
        self._inner = inner

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        """Publish through the wrapped publisher.

        Raises:
            GofluxError: Whatever the wrapped publisher raises (``PublishError``,
                ``EncodeError``, ``InvalidSubject``, ...), unchanged.
        """
        return await self._inner.publish(subject, value, headers=headers, message_id=message_id)

    async def close(self) -> None:
        """Close the wrapped publisher."""
        await self._inner.close()

    def _facts(self) -> Facts | None:
        return facts_of(self._inner)
