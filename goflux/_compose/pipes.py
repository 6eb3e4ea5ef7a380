"""Handlers that forward messages on to a publisher: pipe, pipe_map, pipe_flat_map.

A pipe is a ``Handler[T]`` for any subscriber. It carries each message on to another
subject with its user headers and message ID, and (where tracing is configured) in the
trace of the message it came from: the publish happens inside the consumer span, so
the new message's producer span is its child and the next consumer links to it.
"""

from __future__ import annotations

import inspect
import logging
import uuid
from collections.abc import AsyncIterable, Awaitable, Callable, Iterable
from typing import Any, Final, TypeAlias, TypeVar, overload

from goflux._errors import EncodeError, InvalidSubject, NonRetryable
from goflux._headers import Headers, escape_header_value
from goflux._interfaces import Handler, Publisher
from goflux._message import Message
from goflux._subjects import validate_subject

__all__ = (
    "PIPED_BY_HEADER",
    "DeadLetterObserver",
    "Filter",
    "SubjectMap",
    "pipe",
    "pipe_flat_map",
    "pipe_map",
)

T = TypeVar("T")
U = TypeVar("U")

logger = logging.getLogger("goflux._compose.pipes")

SubjectMap: TypeAlias = str | Callable[[str], str]
"""A pipe's target: a fixed subject, or a function of the incoming subject."""

Filter: TypeAlias = Callable[[Message[T]], bool | Awaitable[bool]]
"""Decides whether a message is forwarded (False: skipped, and acked)."""

DeadLetterObserver: TypeAlias = Callable[[Message[T], Exception], Awaitable[None] | None]
"""Told of a message the pipe failed to forward, with the error (which is then raised)."""


PIPED_BY_HEADER: Final = "Piped-By"
"""User header listing the pipes a message went through (comma-separated IDs)."""


def _piped_by(message: Message[Any]) -> str:
    return message.headers.get(PIPED_BY_HEADER, "") if message.headers else ""


async def _resolve(value: Any) -> Any:
    return await value if inspect.isawaitable(value) else value


class _Pipe:
    """What every pipe does around its transformation: filter, target, forward, observe."""

    __slots__ = ("_dead_letter", "_filter", "_id", "_kind", "_publisher", "_subject")

    def __init__(
        self,
        kind: str,
        publisher: Publisher[Any],
        subject: SubjectMap,
        filter: Filter[Any] | None,
        dead_letter: DeadLetterObserver[Any] | None,
    ) -> None:
        if isinstance(subject, str):
            validate_subject(subject)
        elif not callable(subject):
            raise TypeError(f"subject must be a string or a function, got {subject!r}")
        if filter is not None and not callable(filter):
            raise TypeError(f"filter must be callable, got {filter!r}")
        if dead_letter is not None and not callable(dead_letter):
            raise TypeError(f"dead_letter must be callable, got {dead_letter!r}")
        self._kind = kind
        self._id = uuid.uuid4().hex[:16]  # marks this pipe's output, to recognise it coming back
        self._publisher = publisher
        self._subject = subject
        self._filter = filter
        self._dead_letter = dead_letter

    async def accepts(self, message: Message[Any]) -> bool:
        """Whether the filter (if any) lets ``message`` through."""
        return self._filter is None or bool(await _resolve(self._filter(message)))

    def target(self, message: Message[Any]) -> str:
        """The subject to forward ``message`` to; never its own subject.

        Raises:
            NonRetryable: The target is invalid or is the message's own subject.
        """
        if self._id in _piped_by(message).split(","):
            raise NonRetryable(
                f"{self._kind}: received its own output on {message.subject!r}: its target "
                "lies within the subjects it subscribes to, so it would loop"
            )
        subject = self._subject
        target = subject if isinstance(subject, str) else subject(message.subject)
        try:
            validate_subject(target)
        except InvalidSubject as exc:
            raise NonRetryable(f"{self._kind}: invalid target subject {target!r}") from exc
        if target == message.subject:
            raise NonRetryable(
                f"{self._kind}: target subject {target!r} is the message's own subject; "
                "a pipe never publishes back onto its input"
            ) from InvalidSubject(f"{target!r} is the pipe's input", subject=target)
        return target

    async def forward(
        self, message: Message[Any], target: str, value: Any, message_id: str | None
    ) -> None:
        """Publish ``value`` to ``target`` with ``message``'s user headers and ``message_id``.

        Raises:
            NonRetryable: ``value`` cannot be encoded (the :class:`~goflux.EncodeError`
                chained): retrying the message cannot change that.
            PublishError: The publish failed.
        """
        headers = message.headers.sendable()[0] if message.headers else Headers()
        passed = _piped_by(message)
        headers[PIPED_BY_HEADER] = f"{passed},{self._id}" if passed else self._id
        try:
            receipt = await self._publisher.publish(
                target, value, headers=headers, message_id=message_id
            )
        except EncodeError as exc:  # the same value fails the same way on every delivery
            raise NonRetryable(
                f"{self._kind}: the value for {target!r} cannot be encoded: {exc}"
            ) from exc
        if receipt is not None and receipt.duplicate and message_id is not None:
            delivery = message.delivery
            if delivery is not None and delivery.stream != receipt.stream:
                # Another stream: the ID is this message's own, stored by an earlier
                # attempt (a retried publish whose first answer was lost).
                logger.debug(
                    "%s: %r already stored with ID %r (an earlier attempt)",
                    self._kind,
                    target,
                    message_id,
                )
            elif delivery is None or delivery.num_delivered == 1:
                logger.warning(
                    "%s: %r stored nothing: stream %r already had a message with ID %r. "
                    "If the target is in the same stream as the source, give message_id= "
                    "a function that makes IDs of its own",
                    self._kind,
                    target,
                    receipt.stream,
                    message_id,
                )

    async def failed(self, message: Message[Any], error: Exception) -> None:
        """Tell the dead-letter observer (its own failure is logged, not raised)."""
        if self._dead_letter is None:
            return
        try:
            await _resolve(self._dead_letter(message, error))
        except Exception:
            logger.exception("%s: the dead_letter observer failed", self._kind)


def pipe(
    publisher: Publisher[T],
    *,
    subject: SubjectMap,
    filter: Filter[T] | None = None,
    dead_letter: DeadLetterObserver[T] | None = None,
    message_id: Callable[[Message[T]], str | None] | None = None,
) -> Handler[T]:
    """A handler forwarding each message's payload unchanged to ``subject``.

    Args:
        publisher: Where to publish.
        subject: The target subject, or a function of the incoming subject (such as
            ``lambda s: s.replace("raw.", "clean.", 1)``). A target equal to the
            incoming subject fails the message as :class:`~goflux.NonRetryable`,
            and so does the pipe's own output coming back to it (its target within
            its subscription): each forwarded message names the pipes it went
            through in the ``Piped-By`` header.
        filter: Called (plain or async) with each message; False skips it (the
            handler returns, so it is acked).
        dead_letter: Called (plain or async) with the message and the error when
            forwarding fails; the error is raised afterwards all the same, so the
            transport or retry middleware decides about redelivery.
        message_id: The forwarded message's ID from the incoming message; default:
            the incoming ID, so a redelivered message is stored once downstream.
            Give your own when the target is in the same JetStream stream as the
            source (the same ID there would be dropped as a duplicate).

    Raises:
        InvalidSubject: ``subject`` is a string that is not a valid publish subject.
        TypeError: An option is not callable.
    """
    core = _Pipe("pipe", publisher, subject, filter, dead_letter)

    async def handle(message: Message[T]) -> None:
        if not await core.accepts(message):
            return
        try:
            target = core.target(message)
            identity = message.id if message_id is None else message_id(message)
            await core.forward(message, target, message.payload, identity)
        except Exception as exc:
            await core.failed(message, exc)
            raise

    return handle


@overload
def pipe_map(
    publisher: Publisher[U],
    fn: Callable[[Message[T]], Awaitable[U]],
    *,
    subject: SubjectMap,
    filter: Filter[T] | None = None,
    dead_letter: DeadLetterObserver[T] | None = None,
    message_id: Callable[[Message[T]], str | None] | None = None,
) -> Handler[T]: ...
@overload
def pipe_map(
    publisher: Publisher[U],
    fn: Callable[[Message[T]], U],
    *,
    subject: SubjectMap,
    filter: Filter[T] | None = None,
    dead_letter: DeadLetterObserver[T] | None = None,
    message_id: Callable[[Message[T]], str | None] | None = None,
) -> Handler[T]: ...
def pipe_map(
    publisher: Publisher[Any],
    fn: Callable[[Message[Any]], Any],
    *,
    subject: SubjectMap,
    filter: Filter[Any] | None = None,
    dead_letter: DeadLetterObserver[Any] | None = None,
    message_id: Callable[[Message[Any]], str | None] | None = None,
) -> Handler[Any]:
    """A handler publishing ``fn(message)`` (plain or async) to ``subject``.

    The filter runs on the incoming message, before ``fn``. An error from ``fn`` or
    from the publish reaches ``dead_letter`` and is then raised (raise
    :class:`~goflux.NonRetryable` from ``fn`` for input that can never be mapped).
    Headers, message ID and trace context are carried as by :func:`pipe`.

    Raises:
        InvalidSubject: ``subject`` is a string that is not a valid publish subject.
        TypeError: ``fn`` or an option is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    core = _Pipe("pipe_map", publisher, subject, filter, dead_letter)

    async def handle(message: Message[Any]) -> None:
        if not await core.accepts(message):
            return
        try:
            target = core.target(message)
            value = await _resolve(fn(message))
            identity = message.id if message_id is None else message_id(message)
            await core.forward(message, target, value, identity)
        except Exception as exc:
            await core.failed(message, exc)
            raise

    return handle


@overload
def pipe_flat_map(
    publisher: Publisher[U],
    fn: Callable[[Message[T]], AsyncIterable[U]],
    *,
    subject: SubjectMap,
    filter: Filter[T] | None = None,
    dead_letter: DeadLetterObserver[T] | None = None,
    message_id: Callable[[Message[T], int], str | None] | None = None,
) -> Handler[T]: ...
@overload
def pipe_flat_map(
    publisher: Publisher[U],
    fn: Callable[[Message[T]], Awaitable[Iterable[U]]],
    *,
    subject: SubjectMap,
    filter: Filter[T] | None = None,
    dead_letter: DeadLetterObserver[T] | None = None,
    message_id: Callable[[Message[T], int], str | None] | None = None,
) -> Handler[T]: ...
@overload
def pipe_flat_map(
    publisher: Publisher[U],
    fn: Callable[[Message[T]], Iterable[U]],
    *,
    subject: SubjectMap,
    filter: Filter[T] | None = None,
    dead_letter: DeadLetterObserver[T] | None = None,
    message_id: Callable[[Message[T], int], str | None] | None = None,
) -> Handler[T]: ...
def pipe_flat_map(
    publisher: Publisher[Any],
    fn: Callable[[Message[Any]], Any],
    *,
    subject: SubjectMap,
    filter: Filter[Any] | None = None,
    dead_letter: DeadLetterObserver[Any] | None = None,
    message_id: Callable[[Message[Any], int], str | None] | None = None,
) -> Handler[Any]:
    """A handler publishing every item ``fn(message)`` yields to ``subject``, in order.

    ``fn`` returns an iterable, an awaitable of one, or is an async generator; zero
    items forward nothing. Item ``n`` (from 1) gets the message ID ``<incoming ID>:<n>``
    (or ``message_id(message, n)``), so when a publish fails midway and the message is
    redelivered, the items stored before are de-duplicated by JetStream instead of
    stored twice. Filter, headers, trace context and ``dead_letter`` are as in
    :func:`pipe_map`.

    Raises:
        InvalidSubject: ``subject`` is a string that is not a valid publish subject.
        TypeError: ``fn`` or an option is not callable.
    """
    if not callable(fn):
        raise TypeError(f"fn must be callable, got {fn!r}")
    core = _Pipe("pipe_flat_map", publisher, subject, filter, dead_letter)

    def identity(message: Message[Any], n: int) -> str | None:
        if message_id is not None:
            return message_id(message, n)
        return None if message.id is None else f"{escape_header_value(message.id)}:{n}"

    async def handle(message: Message[Any]) -> None:
        if not await core.accepts(message):
            return
        try:
            target = core.target(message)
            items = fn(message)
            n = 0
            if isinstance(items, AsyncIterable):
                async for item in items:
                    n += 1
                    await core.forward(message, target, item, identity(message, n))
            else:
                for item in await _resolve(items):
                    n += 1
                    await core.forward(message, target, item, identity(message, n))
        except Exception as exc:
            await core.failed(message, exc)
            raise

    return handle
