"""The message being handled, reachable from code deep in the handler, and forwarded on publish.

:func:`message_context` makes the message available through ``contextvars`` to
everything the handler calls (and to tasks it starts): :func:`current_message`,
:func:`current_message_id`, :func:`current_headers`. :func:`forward_context` wraps a
publisher so that every publish made there carries the handled message's user headers
and its ID (as ``Causation-Id``, with the ``Correlation-Id`` of the whole chain), and,
if asked, a message ID derived from it, so a redelivered handler's publishes are
de-duplicated. Trace context flows as with any publish made in a handler: the consumer
span is the active span, so the new message continues its trace.
"""

from __future__ import annotations

from collections.abc import Collection
from contextvars import ContextVar
from typing import Final, TypeVar

from goflux._headers import Headers, HeadersLike, check_message_id, escape_header_value
from goflux._interfaces import GenericMiddleware, GenericPublisherMiddleware, Handler, Publisher
from goflux._message import Message
from goflux._receipt import PublishReceipt
from goflux.middleware._wrapping import WrappingPublisher

__all__ = (
    "CAUSATION_ID_HEADER",
    "CORRELATION_ID_HEADER",
    "current_headers",
    "current_message",
    "current_message_id",
    "forward_context",
    "message_context",
)

T = TypeVar("T")

CAUSATION_ID_HEADER: Final = "Causation-Id"
"""User header naming the message whose handler published this one."""
CORRELATION_ID_HEADER: Final = "Correlation-Id"
"""User header naming the first message of a chain of handlers (kept along the chain)."""
_CHAIN_HEADERS: Final = frozenset({CAUSATION_ID_HEADER.lower(), CORRELATION_ID_HEADER.lower()})


class _Handling:
    """The message being handled, and the IDs derived from it so far."""

    __slots__ = ("derived", "message")

    def __init__(self, message: Message[object]) -> None:
        self.message = message
        self.derived: dict[tuple[str, str], int] | None = None  # (producer, subject) -> count


_CURRENT: ContextVar[_Handling | None] = ContextVar("goflux_current_message", default=None)


def message_context() -> GenericMiddleware:
    """Expose the handled message to the code the handler runs, through ``contextvars``.

    Inside the handler (and in tasks it creates) :func:`current_message`,
    :func:`current_message_id` and :func:`current_headers` return the message's
    details, and publishers wrapped with :func:`forward_context` forward them.
    """

    def middleware(handler: Handler[T]) -> Handler[T]:
        async def handle(message: Message[T]) -> None:
            token = _CURRENT.set(_Handling(message))
            try:
                await handler(message)
            finally:
                _CURRENT.reset(token)

        return handle

    return middleware


def current_message() -> Message[object] | None:
    """The message being handled, or None outside a :func:`message_context` handler."""
    handling = _CURRENT.get()
    return handling.message if handling is not None else None


def current_message_id() -> str | None:
    """The ID of the message being handled, or None (outside a handler, or no ID)."""
    handling = _CURRENT.get()
    return handling.message.id if handling is not None else None


def current_headers() -> Headers:
    """A copy of the handled message's user headers (empty outside a handler)."""
    handling = _CURRENT.get()
    return handling.message.headers.copy() if handling is not None else Headers()


class _Forwarding(WrappingPublisher[T]):
    """A publisher that adds the handled message's headers, IDs and derived message ID."""

    __slots__ = ("_producer", "_wanted")

    def __init__(
        self, inner: Publisher[T], wanted: frozenset[str] | None, producer: str | None
    ) -> None:
        super().__init__(inner)
        self._wanted = wanted  # lowercase names to forward; None: all
        self._producer = producer

    def _forwarded(self, given: HeadersLike | None, message: Message[object]) -> Headers:
        out = Headers(given) if given else Headers()
        # A peer's odd header (a "/" in a name, say) must not fail the publish.
        received, _ = message.headers.sendable() if message.headers else (Headers(), [])
        wanted = self._wanted
        if wanted is None or wanted:
            for name in received:
                if name in out or (wanted is not None and name.lower() not in wanted):
                    continue  # what the caller set wins
                if name.lower() in _CHAIN_HEADERS:
                    continue  # set below, for this message
                for value in received.get_all(name):
                    out.add(name, value)
        source = escape_header_value(message.id) if message.id is not None else None
        if source is not None and CAUSATION_ID_HEADER not in out:
            out[CAUSATION_ID_HEADER] = source
        correlation = received.get(CORRELATION_ID_HEADER) or source
        if correlation is not None and CORRELATION_ID_HEADER not in out:
            out[CORRELATION_ID_HEADER] = correlation
        return out

    def _derived_id(self, handling: _Handling, subject: str) -> str | None:
        producer, source = self._producer, handling.message.id
        if producer is None or source is None:
            return None
        derived_so_far = handling.derived
        if derived_so_far is None:
            derived_so_far = handling.derived = {}
        count = derived_so_far[producer, subject] = derived_so_far.get((producer, subject), 0) + 1
        derived = f"{escape_header_value(source)}:{producer}:{subject}"
        return derived if count == 1 else f"{derived}:{count}"

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        """Publish through the wrapped publisher, forwarding the handled message's context.

        Outside a :func:`message_context` handler this is a plain publish.

        Raises:
            Whatever the wrapped publisher raises.
        """
        handling = _CURRENT.get()
        if handling is None:
            return await self._inner.publish(subject, value, headers=headers, message_id=message_id)
        if message_id is None:
            message_id = self._derived_id(handling, subject)
        return await self._inner.publish(
            subject,
            value,
            headers=self._forwarded(headers, handling.message),
            message_id=message_id,
        )


def forward_context(
    *, headers: bool | Collection[str] = True, derive_ids: str | None = None
) -> GenericPublisherMiddleware:
    """Forward the handled message's context on every publish made inside its handler.

    Needs :func:`message_context` on the handler. A publish made there then carries:

    - the handled message's user headers: all of them, only the names in ``headers``,
      or none with ``headers=False`` (headers given to ``publish`` win);
    - its ID as ``Causation-Id``, and as ``Correlation-Id`` unless it carries one
      already (then that one travels on, naming the start of the chain);
    - with ``derive_ids="<producer name>"``, a message ID derived from the handled
      message's ID, the producer name and the subject, unless ``publish`` is given
      one: ``<id>:<producer>:<subject>``, then ``...:2``, ``...:3`` for further
      publishes to the same subject. A redelivered message whose handler publishes
      the same messages in the same order produces the same IDs, so JetStream stores
      them once. Use a producer name unique among the services that consume the same
      messages, so their outputs never share an ID;
    - the trace context, as every publish does where tracing is configured: the
      consumer span is active in the handler, so the published message continues its
      trace (with tracing off, nothing is propagated).

    Put it before (outside) :func:`retry_publish` in :func:`goflux.chain_publishers`:
    ``retry_publish`` gives an ID-less publish a random ID, which leaves nothing to
    derive. Outside a handler the wrapper publishes unchanged. It owns the wrapped
    publisher: closing the wrapper closes it.

    Raises:
        TypeError: ``headers`` is a single string instead of a collection of names.
        InvalidHeader: ``derive_ids`` cannot be part of a message ID.
    """
    if isinstance(headers, str):
        raise TypeError(f"headers must be True, False or a collection of names, got {headers!r}")
    if derive_ids is not None:
        check_message_id(derive_ids)
    wanted: frozenset[str] | None
    if headers is True:
        wanted = None
    elif headers is False:
        wanted = frozenset()
    else:
        wanted = frozenset(name.lower() for name in headers)

    def middleware(publisher: Publisher[T]) -> Publisher[T]:
        return _Forwarding(publisher, wanted, derive_ids)

    return middleware
