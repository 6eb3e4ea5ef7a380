"""Fixed-subject views of publishers and subscribers: bound publishers, subscribers, topics."""

from __future__ import annotations

import asyncio
from typing import Generic, TypeVar

from goflux._compose.streams import DEFAULT_BUFFER, MessageStream, message_stream
from goflux._facts import Facts, facts_of
from goflux._headers import HeadersLike
from goflux._interfaces import Handler, Publisher, Subscriber, Subscription
from goflux._lifecycle import CloseOnExit
from goflux._receipt import PublishReceipt
from goflux._subjects import validate_pattern, validate_subject

__all__ = (
    "BoundPublisher",
    "BoundSubscriber",
    "Topic",
    "bind_publisher",
    "bind_subscriber",
    "bind_topic",
)

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)
T_contra = TypeVar("T_contra", contravariant=True)


class BoundPublisher(CloseOnExit, Generic[T_contra]):
    """A publisher fixed to one subject; closing it closes the publisher it wraps."""

    def __init__(self, publisher: Publisher[T_contra], subject: str) -> None:
        self._publisher = publisher
        self._subject = validate_subject(subject)

    @property
    def subject(self) -> str:
        """The subject every publish goes to."""
        return self._subject

    async def publish(
        self,
        value: T_contra,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        """Publish ``value`` to the bound subject (see :meth:`goflux.Publisher.publish`).

        Raises:
            EncodeError: ``value`` cannot be encoded.
            PublishError: The transport failed to publish.
        """
        return await self._publisher.publish(
            self._subject, value, headers=headers, message_id=message_id
        )

    async def close(self) -> None:
        """Close the wrapped publisher."""
        await self._publisher.close()

    def _facts(self) -> Facts | None:
        return facts_of(self._publisher)


class BoundSubscriber(CloseOnExit, Generic[T_co]):
    """A subscriber fixed to one subject (or pattern); closing it closes the subscriber."""

    def __init__(self, subscriber: Subscriber[T_co], subject: str) -> None:
        self._subscriber = subscriber
        self._subject = validate_pattern(subject)

    @property
    def subject(self) -> str:
        """The subject or pattern subscribed to."""
        return self._subject

    async def start(self, handler: Handler[T_co]) -> Subscription:
        """Subscribe ``handler``; return once messages published from now on arrive.

        Raises:
            SubscribeError: The subscriber is closed or the transport refused.
        """
        return await self._subscriber.start(self._subject, handler)

    async def subscribe(self, handler: Handler[T_co]) -> None:
        """Subscribe ``handler`` and run until cancelled or closed, then drain.

        Raises:
            SubscribeError: The subscription could not start, or failed.
        """
        await self._subscriber.subscribe(self._subject, handler)

    def stream(self, *, buffer: int = DEFAULT_BUFFER) -> MessageStream[T_co]:
        """The bound subject's messages as a :class:`~goflux.MessageStream`.

        Raises:
            ValueError: ``buffer`` < 1.
        """
        return message_stream(self._subscriber, self._subject, buffer=buffer)

    async def close(self) -> None:
        """Close the wrapped subscriber (draining its subscriptions)."""
        await self._subscriber.close()

    def _facts(self) -> Facts | None:
        return facts_of(self._subscriber)


class Topic(BoundPublisher[T], BoundSubscriber[T]):
    """One subject to publish to and subscribe on, through a publisher and a subscriber.

    Made by :func:`bind_topic`. Closing it closes both (the subscriber first, so
    handlers still running can publish while they finish).
    """

    def __init__(self, publisher: Publisher[T], subscriber: Subscriber[T], subject: str) -> None:
        BoundPublisher.__init__(self, publisher, subject)
        BoundSubscriber.__init__(self, subscriber, subject)

    async def close(self) -> None:
        """Close the subscriber, then the publisher (the publisher even if the first fails)."""
        try:
            await self._subscriber.close()
        finally:
            await asyncio.shield(self._publisher.close())


def bind_publisher(publisher: Publisher[T], subject: str) -> BoundPublisher[T]:
    """``publisher`` fixed to ``subject``: ``await bound.publish(value)``.

    Raises:
        InvalidSubject: ``subject`` is not a valid publish subject (no wildcards).
    """
    return BoundPublisher(publisher, subject)


def bind_subscriber(subscriber: Subscriber[T], subject: str) -> BoundSubscriber[T]:
    """``subscriber`` fixed to ``subject`` (a pattern may have wildcards).

    Raises:
        InvalidSubject: ``subject`` is not a valid pattern.
    """
    return BoundSubscriber(subscriber, subject)


def bind_topic(publisher: Publisher[T], subscriber: Subscriber[T], subject: str) -> Topic[T]:
    """A :class:`Topic`: publish to and subscribe on ``subject``.

    Raises:
        InvalidSubject: ``subject`` is not a valid publish subject (no wildcards).
    """
    return Topic(publisher, subscriber, subject)
