"""Publishing to JetStream with acknowledgement."""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, overload

import nats.errors
import nats.js.errors
from nats.js import JetStreamContext
from nats.js.api import PubAck

from goflux._codecs import Codec
from goflux._errors import ExpectationFailed, PayloadTooLarge, PublishError
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit, closed_publisher_error
from goflux._receipt import PublishReceipt
from goflux._scopes import NullScope, PublishScope, PublishScopes
from goflux._telemetry import Telemetry
from goflux._wire import check_size, outgoing
from goflux.transports._natspy import connection
from goflux.transports.jetstream._system import SYSTEM

__all__ = ("Outgoing", "Publisher")

T = TypeVar("T")

DEFAULT_TIMEOUT = 5.0
DEFAULT_WINDOW = 256
_PENDING: Any = None  # placeholder in the results list until the PubAck settles

_EXPECTATIONS = {
    10060: "stream",
    10070: "last_message_id",
    10071: "last_sequence",
}
# Refusals that a retry of the same message cannot overcome whatever their status
# code: the message or its headers exceed the stream's maximum size.
_PERMANENT_REFUSALS = frozenset({10054, 10097})


@dataclass(frozen=True, slots=True)
class Outgoing(Generic[T]):
    """One message for :meth:`Publisher.publish_many`."""

    subject: str
    value: T
    headers: HeadersLike | None = None
    message_id: str | None = None


def _refused(
    subject: str, code: int | None, err_code: int | None, description: str
) -> PublishError:
    expectation = _EXPECTATIONS.get(err_code) if err_code is not None else None
    if expectation is not None:
        return ExpectationFailed(
            f"publish to {subject!r} refused, nothing stored: {description}",
            subject=subject,
            expectation=expectation,
        )
    # A 4xx refusal (a sealed stream, a bad request) cannot succeed on retry; a 503
    # (a full stream, JetStream starting up) may.
    permanent = err_code in _PERMANENT_REFUSALS or (code is not None and 400 <= code < 500)
    return PublishError(
        f"publish to {subject!r} refused: {description}",
        subject=subject,
        permanent=permanent,
        err_code=err_code,
    )


def _receipt(data: bytes, subject: str) -> PublishReceipt:
    try:
        reply = json.loads(data)
    except ValueError as exc:
        raise PublishError(f"publish to {subject!r}: unreadable PubAck", subject=subject) from exc
    error = reply.get("error")
    if error is not None:
        raise _refused(
            subject, error.get("code"), error.get("err_code"), error.get("description", "")
        )
    return PublishReceipt(
        stream=reply["stream"],
        sequence=reply["seq"],
        duplicate=bool(reply.get("duplicate")),
        domain=reply.get("domain"),
    )


def _no_stream(subject: str) -> PublishError:
    return PublishError(f"publish to {subject!r}: no stream captures this subject", subject=subject)


def _timeout_error(subject: str, timeout: float) -> PublishError:
    return PublishError(
        f"publish to {subject!r}: no PubAck within {timeout}s; the message may still have "
        "been stored; publish it again with the same message_id so the server de-duplicates it",
        subject=subject,
        may_be_stored=True,
    )


def _send_error(subject: str, exc: BaseException) -> PublishError:
    if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return _no_stream(subject)
    if isinstance(exc, nats.js.errors.APIError):
        return _refused(subject, exc.code, exc.err_code, exc.description or str(exc))
    permanent = isinstance(exc, nats.errors.ConnectionClosedError | nats.errors.MaxPayloadError)
    return PublishError(
        f"publish to {subject!r} failed: {exc}", subject=subject, permanent=permanent
    )


# An entry awaiting its PubAck: (index, subject, ack future, deadline, timeout, scope).
_InFlight = tuple[int, str, "asyncio.Future[PubAck]", float, float, "PublishScope | NullScope"]


class Publisher(CloseOnExit, Generic[T]):
    """Publishes values of type ``T`` to JetStream and waits for the server's PubAck.

    Every publish returns a :class:`~goflux.PublishReceipt` (stream, sequence,
    duplicate). With a ``message_id`` the server stores a message once within the
    stream's duplicate window, so a retried publish is safe.

    Args:
        js: A JetStream context of a connected nats-py client (the caller owns it).
        codec: Encodes the values.
        timeout: Seconds to wait for each PubAck.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.

    Raises:
        ValueError: ``timeout`` is not positive.
    """

    def __init__(
        self,
        js: JetStreamContext,
        codec: Codec[T],
        *,
        timeout: float = DEFAULT_TIMEOUT,
        telemetry: Telemetry | None = None,
    ) -> None:
        if timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self._js = js
        self._nc = connection(js)
        self._codec = codec
        self._timeout = timeout
        self._scopes = PublishScopes(Telemetry.or_default(telemetry), SYSTEM)
        self._closed = False

    def _prepare(
        self,
        subject: str,
        value: T,
        headers: HeadersLike | None,
        message_id: str | None,
        expected: dict[str, str] | None,
    ) -> tuple[bytes, dict[str, str]]:
        if self._closed:
            raise closed_publisher_error(subject)
        wire = outgoing(subject, headers, message_id, jetstream=True)
        if expected:
            wire.update(expected)
        return self._codec.encode(value), wire

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
        expected_stream: str | None = None,
        expected_last_sequence: int | None = None,
        expected_last_subject_sequence: int | None = None,
        expected_last_message_id: str | None = None,
        timeout: float | None = None,
    ) -> PublishReceipt:
        """Publish ``value`` to ``subject`` and wait until the stream has stored it.

        The ``expected_*`` options make the publish conditional (optimistic
        concurrency): the server stores it only if the stream is named
        ``expected_stream``, its last sequence (or the subject's last sequence) is the
        given one, or its last message ID is the given one.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            EncodeError: ``value`` cannot be encoded.
            ExpectationFailed: An ``expected_*`` condition did not hold; nothing stored.
            PublishError: No stream captures ``subject``, the server refused it, the
                connection is closed, or no PubAck arrived in time (then
                ``may_be_stored`` is True).
        """
        expected = _expectations(
            expected_stream,
            expected_last_sequence,
            expected_last_subject_sequence,
            expected_last_message_id,
        )
        wait = self._timeout if timeout is None else timeout
        data, wire = self._prepare(subject, value, headers, message_id, expected)
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            scope.set_body_size(len(data))
            check_size(subject, wire, data, self._nc.max_payload)
            try:
                reply = await self._nc.request(subject, data, timeout=wait, headers=wire or None)
            except nats.errors.TimeoutError as exc:
                raise _timeout_error(subject, wait) from exc
            except nats.errors.Error as exc:
                raise _send_error(subject, exc) from exc
            return _receipt(reply.data, subject)

    @overload
    async def publish_many(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float | None = None,
        return_exceptions: Literal[False] = False,
    ) -> list[PublishReceipt]: ...

    @overload
    async def publish_many(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float | None = None,
        return_exceptions: Literal[True],
    ) -> list[PublishReceipt | PublishError]: ...

    async def publish_many(
        self,
        messages: Iterable[Outgoing[T]] | AsyncIterable[Outgoing[T]],
        *,
        window: int = DEFAULT_WINDOW,
        timeout: float | None = None,
        return_exceptions: bool = False,
    ) -> list[PublishReceipt] | list[PublishReceipt | PublishError]:
        """Publish many messages with up to ``window`` PubAcks outstanding at a time.

        Each PubAck is awaited with ``timeout`` (default: the publisher's). Receipts
        come back in input order. Messages are sent in input order; with message IDs a
        retry of the whole batch is de-duplicated by the server.

        Args:
            messages: What to publish (a list, a generator or an async iterator).
            window: Maximum publishes awaiting their PubAck.
            timeout: Seconds to wait for each PubAck.
            return_exceptions: Put a :class:`PublishError` in place of each failed
                receipt instead of raising the first failure.

        Raises:
            ValueError: ``window`` < 1.
            TypeError: An item is not an :class:`Outgoing` (raised where it is met).
            PublishError: The first failure (after every publish in flight settled),
                unless ``return_exceptions``. Bad input (subject, headers, encoding) of
                a message raises before anything after it is sent. Once the publisher
                or the connection is closed, each message left gets a PublishError.
        """
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window}")
        wait = self._timeout if timeout is None else timeout
        loop = asyncio.get_running_loop()
        results: list[PublishReceipt | PublishError] = []
        in_flight: deque[_InFlight] = deque()
        index = 0
        try:
            if isinstance(messages, AsyncIterable):
                async for item in messages:
                    if len(in_flight) >= window:
                        await self._settle(in_flight.popleft(), results, loop)
                    await self._send(index, item, wait, in_flight, results, loop)
                    index += 1
            else:
                for item in messages:
                    if len(in_flight) >= window:
                        await self._settle(in_flight.popleft(), results, loop)
                    await self._send(index, item, wait, in_flight, results, loop)
                    index += 1
        finally:
            # Whatever happens, leave nothing in flight behind.
            while in_flight:
                await self._settle(in_flight.popleft(), results, loop)
        if not return_exceptions:
            for result in results:
                if isinstance(result, PublishError):
                    raise result
        return results

    async def _send(
        self,
        index: int,
        item: Outgoing[T],
        wait: float,
        in_flight: deque[_InFlight],
        results: list[PublishReceipt | PublishError],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        if not isinstance(item, Outgoing):
            raise TypeError(f"publish_many takes Outgoing messages, got {item!r} (item {index})")
        subject = item.subject
        if self._closed or self._nc.is_closed:
            # Not bad input: this and the remaining messages each get their error.
            why = "publisher is closed" if self._closed else "the connection is closed"
            results.append(closed_publisher_error(subject, why))
            return
        data, wire = self._prepare(subject, item.value, item.headers, item.message_id, None)
        scope = self._scopes.open(subject, wire, message_id=item.message_id)
        scope.__enter__()
        scope.set_body_size(len(data))
        try:
            check_size(subject, wire, data, self._nc.max_payload)
        except PayloadTooLarge as too_large:
            scope.__exit__(PayloadTooLarge, too_large, None)
            results.append(too_large)
            return
        results.append(_PENDING)
        try:
            # No wait_stall: with it nats-py wraps every call in wait_for (a task and a
            # timer per message). The window keeps us within its pending limit, and a
            # closed connection is caught above, so its slots cannot run out.
            ack = await self._js.publish_async(subject, data, headers=wire or None)
        except nats.errors.Error as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():
                # nats-py turns our cancellation into TooManyStalledMsgsError: undo that.
                scope.__exit__(asyncio.CancelledError, asyncio.CancelledError(), None)
                raise asyncio.CancelledError from exc
            error = _send_error(subject, exc)
            scope.__exit__(type(error), error, None)
            results[index] = error
            return
        in_flight.append((index, subject, ack, loop.time() + wait, wait, scope))

    async def _settle(
        self,
        entry: _InFlight,
        results: list[PublishReceipt | PublishError],
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        index, subject, ack, deadline, timeout, scope = entry
        if not ack.done():
            await asyncio.wait((ack,), timeout=max(deadline - loop.time(), 0.0))
        outcome: PublishReceipt | PublishError
        if not ack.done():
            ack.cancel()  # also frees nats-py's bookkeeping for it
            outcome = _timeout_error(subject, timeout)
        elif ack.cancelled():
            outcome = PublishError(f"publish to {subject!r} cancelled", subject=subject)
        elif (exc := ack.exception()) is not None:
            outcome = _send_error(subject, exc)
        else:
            pub_ack = ack.result()
            outcome = PublishReceipt(
                stream=pub_ack.stream,
                sequence=pub_ack.seq,
                duplicate=bool(pub_ack.duplicate),
                domain=pub_ack.domain,
            )
        if isinstance(outcome, PublishError):
            scope.__exit__(type(outcome), outcome, None)
        else:
            scope.__exit__(None, None, None)
        results[index] = outcome

    async def close(self) -> None:
        """Refuse further publishes. The caller owns the connection."""
        self._closed = True


def _expectations(
    stream: str | None,
    last_sequence: int | None,
    last_subject_sequence: int | None,
    last_message_id: str | None,
) -> dict[str, str] | None:
    if (
        stream is None
        and last_sequence is None
        and last_subject_sequence is None
        and (last_message_id is None)
    ):
        return None
    expected: dict[str, str] = {}
    if stream is not None:
        expected["Nats-Expected-Stream"] = stream
    if last_sequence is not None:
        expected["Nats-Expected-Last-Sequence"] = str(last_sequence)
    if last_subject_sequence is not None:
        expected["Nats-Expected-Last-Subject-Sequence"] = str(last_subject_sequence)
    if last_message_id is not None:
        expected["Nats-Expected-Last-Msg-Id"] = last_message_id
    return expected
