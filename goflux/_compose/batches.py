"""Messages in micro-batches bounded by size and time: :func:`micro_batches`."""

from __future__ import annotations

import asyncio
import math
from types import TracebackType
from typing import Generic, Self, TypeVar

from goflux._compose.settling import settle_all
from goflux._compose.streams import Loop, MessageStream, message_stream
from goflux._interfaces import Subscriber
from goflux._message import Message

__all__ = ("MicroBatches", "micro_batches")

T = TypeVar("T")


class MicroBatches(Generic[T]):
    """An async iterator of lists of messages, bounded by size and time.

    Made by :func:`micro_batches`. A batch is yielded when it holds ``max_messages``
    messages, or ``max_wait`` seconds after its first message arrived (a partial
    batch), or when the stream ends; no empty batch is ever yielded. Use it in
    ``async with``, which settles each batch by its outcome::

        async with micro_batches(sub, "orders.>", max_messages=500, max_wait=1.0) as batches:
            async for batch in batches:
                await store(batch)  # returns: every message of the batch is acked

    - Asking for the next batch (the loop body returned) acks every message of the
      previous batch left unsettled; so does leaving ``async with`` normally.
    - An exception out of the loop body naks every unsettled message of the current
      batch (redelivered at once, the whole batch) as it leaves ``async with``.
    - Without ``async with``, leaving the loop before the batches ended (``break``, an
      exception, cancellation), or dropping the last reference to started batches,
      naks every unsettled message at once, the current batch included: nothing tells
      a ``break`` from a failure there, so what may not be done is redelivered.

    Settling messages yourself inside the body is allowed; those are left alone. A
    batch holds messages from a subscriber that keeps them in flight, so a JetStream
    subscriber's ``max_in_flight`` must be at least ``2 * max_messages`` for full
    batches while the next one fills.
    """

    def __init__(self, stream: MessageStream[T], *, max_messages: int, max_wait: float) -> None:
        if max_messages < 1:
            raise ValueError(f"max_messages must be >= 1, got {max_messages}")
        if not (max_wait > 0 and math.isfinite(max_wait)):
            raise ValueError(f"max_wait must be a positive number of seconds, got {max_wait}")
        self._stream = stream
        self._max_messages = max_messages
        self._max_wait = max_wait
        self._current: list[Message[T]] = []
        self._ended = False

    @property
    def stream(self) -> MessageStream[T]:
        """The message stream the batches are cut from."""
        return self._stream

    async def start(self) -> Self:
        """Subscribe now; return once messages published from now on arrive.

        Raises:
            SubscribeError: The subscription could not start.
        """
        await self._stream.start()
        return self

    async def stop(self, timeout: float | None = None) -> None:
        """Stop taking messages; iteration ends after the ones already received."""
        await self._stream.stop(timeout)

    async def close(self, *, ack: bool = False) -> None:
        """Settle the current batch (nak by default, ack with ``ack=True``) and end the stream.

        Messages received but not yet in a batch are handed back (see
        :meth:`MessageStream.close`).
        """
        batch, self._current = self._current, []
        if ack:
            await settle_all(batch, ack=True)
        # The stream hands back what is unsettled once its subscription stopped
        # receiving, so a nak'd message is not redelivered to it on the way out.
        await self._stream.close()

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()  # the stream is owned: leaving a loop keeps it open
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close(ack=exc is None)

    def __aiter__(self) -> Loop[list[Message[T]]]:
        """A loop over the batches; leaving it early hands them back (see the class)."""
        return Loop(self.__anext__, self._stream._feed)

    async def __anext__(self) -> list[Message[T]]:
        """Settle the previous batch (ack), then collect and return the next one.

        Raises:
            StopAsyncIteration: The stream has ended.
            SubscribeError: The subscription failed.
        """
        previous, self._current = self._current, []
        await settle_all(previous, ack=True)
        if self._ended:
            raise StopAsyncIteration
        stream = self._stream
        first = await stream.next_entry()  # StopAsyncIteration when the stream has ended
        assert first is not None  # no deadline given
        batch = [first.message]
        deadline = asyncio.get_running_loop().time() + self._max_wait
        try:
            while len(batch) < self._max_messages:
                entry = await stream.next_entry(deadline)
                if entry is None:
                    break
                batch.append(entry.message)
        except StopAsyncIteration:
            self._ended = True  # yield what there is, end on the next call
        except BaseException:
            await settle_all(batch, ack=False)  # cancelled or failed: hand them back
            raise
        self._current = batch
        return batch


def micro_batches(
    subscriber: Subscriber[T], subject: str, *, max_messages: int, max_wait: float
) -> MicroBatches[T]:
    """Messages on ``subject`` in batches of up to ``max_messages``, or ``max_wait`` seconds.

    See :class:`MicroBatches` for when batches are settled. The subscription starts
    when the batches are entered (``async with``) or first iterated.

    Raises:
        InvalidSubject: ``subject`` is not a valid pattern.
        ValueError: ``max_messages`` < 1, or ``max_wait`` is not a positive number.
    """
    if max_messages < 1:
        raise ValueError(f"max_messages must be >= 1, got {max_messages}")
    stream = message_stream(subscriber, subject, buffer=max_messages)
    return MicroBatches(stream, max_messages=max_messages, max_wait=max_wait)
