"""Fire-and-forget publishing on core NATS."""

from __future__ import annotations

import contextlib
from collections import OrderedDict
from typing import Final, Generic, TypeVar

import nats.errors
from nats.aio.client import Client

from goflux._codecs import Codec
from goflux._errors import PayloadTooLarge, PublishError
from goflux._facts import Facts
from goflux._headers import HeadersLike
from goflux._lifecycle import CloseOnExit, closed_publisher_error
from goflux._otel.scopes import PublishScopes
from goflux._otel.telemetry import Telemetry
from goflux._wire import check_size, outgoing
from goflux.transports._limits import in_flight_error, lost_before_error
from goflux.transports._natspy import flush
from goflux.transports._refusals import Overflow, closed_reason, refusals
from goflux.transports.nats._system import SYSTEM

__all__ = ("Publisher",)

T = TypeVar("T")

FLUSH_TIMEOUT = 5  # seconds (nats-py takes an int)
CONFIRMED_SUBJECTS: Final = 4096  # subjects confirm_first remembers (least recent forgotten)


class Publisher(CloseOnExit, Generic[T]):
    """Publishes values of type ``T`` on core NATS (fire and forget, no persistence).

    Messages carry the goflux wire format: the bare encoded body, ``X-Message-ID``,
    ``X-Goflux-<key>`` user headers and the trace context. Core NATS delivers to the
    subscribers present at publish time; use JetStream when messages must persist.

    A server that refuses a publish (the credentials may not publish to the subject)
    says so asynchronously, after ``publish`` returned. The refusal is kept, and the
    next publish to that subject on the same connection raises
    :class:`~goflux.PermissionDenied` instead of sending (then it is forgotten, so a
    permission granted later is picked up). ``publish(..., confirm=True)`` waits for
    the server to have read the message and raises at once if it refused it;
    ``confirm_first=True`` does so for the first publish to each subject.

    A config reload may lower the server's ``max_payload`` without telling the
    client; the server then closes the connection for a larger message. The client
    reconnects and learns the new limit; the next publish of this publisher raises
    :class:`~goflux.MaxPayloadLowered` (naming the new limit; not sent) if it had
    published without confirmation before, since what it sent after the larger
    message was lost too.

    Args:
        nc: A connected nats-py client (the caller owns it).
        codec: Encodes the values.
        telemetry: Tracing and metrics; default: OpenTelemetry globals.
        confirm_first: Confirm the first publish to each subject as ``confirm=True``
            does (one round trip to the server), so that a subject the credentials
            may not publish to raises :class:`~goflux.PermissionDenied` on its first
            publish; later publishes to it cost nothing more. The last 4,096 subjects
            confirmed are remembered; a subject refused is confirmed again each time.
    """

    def __init__(
        self,
        nc: Client,
        codec: Codec[T],
        *,
        telemetry: Telemetry | None = None,
        confirm_first: bool = False,
    ) -> None:
        self._nc = nc
        self._refusals = refusals(nc)
        self._codec = codec
        self._scopes = PublishScopes(Telemetry.or_default(telemetry), SYSTEM)
        self._closed = False
        self._confirmed: OrderedDict[str, None] | None = OrderedDict() if confirm_first else None
        self._overflows = self._refusals.overflows  # the server's overflows seen
        self._unconfirmed = False  # sent something since the last confirmation
        self._largest_unconfirmed = 0  # the largest body sent since the last confirmation
        self._unconfirmed_limit = 0  # the client's max_payload when the largest was sent

    def _facts(self) -> Facts:
        return Facts("nats", codec=self._codec, client=self._nc)

    async def publish(
        self,
        subject: str,
        value: T,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
        confirm: bool = False,
    ) -> None:
        """Publish ``value`` to ``subject``; returns once the client has queued it.

        With ``confirm=True`` it returns once the server has read the message (one
        round trip: a PING after it, answered in order), so a refusal raises here;
        so does the first publish to each subject with ``confirm_first``.

        Raises:
            InvalidSubject: ``subject`` is not a valid publish subject.
            InvalidHeader: A header or the message ID cannot travel on the wire.
            EncodeError: ``value`` cannot be encoded.
            PermissionDenied: The server refused this publish (``confirm=True``), or
                an earlier one to ``subject``; this one was not sent then.
            PayloadTooLarge: Headers and body exceed the server's ``max_payload``
                (nothing sent; with ``confirm=True`` also when the server had
                lowered it and closed the connection for this message).
            MaxPayloadLowered: The server lowered its ``max_payload`` and closed the
                connection for a larger message, after this publisher's earlier
                unconfirmed publishes (this one was not sent), or while this one
                waited for its confirmation (``may_be_stored``).
            PublishError: The publisher or connection is closed (with the server's
                reason, if it gave one), or the client's reconnect buffer is full; with
                ``confirm=True`` also when the connection dropped after the message was
                sent and before the server confirmed it (``may_be_stored``: it may have
                been lost; the confirmation of the next connection does not count).
        """
        if self._closed:
            raise closed_publisher_error(subject)
        if self._unconfirmed and self._largest_unconfirmed > self._nc.max_payload > 0:
            self._reset_unseen()
        if self._refusals.overflows != self._overflows:
            await self._after_overflow(subject)
        earlier = self._refusals.take(subject)
        if earlier is not None:
            raise earlier.error(f"an earlier publish to {subject!r} (this one was not sent)")
        wire = outgoing(subject, headers, message_id, jetstream=False)
        with self._scopes.open(subject, wire, message_id=message_id) as scope:
            data = self._codec.encode(value)
            scope.set_body_size(len(data))
            check_size(subject, wire, data, self._nc.max_payload)
            # A drop of the connection after this, and before a confirmation, may lose it
            # (what nats-py still buffered goes out on the next connection).
            sent_on = self._nc.stats["reconnects"] + (0 if self._nc.is_connected else 1)
            try:
                await self._nc.publish(subject, data, headers=wire or None)
            except nats.errors.MaxPayloadError as exc:
                raise PublishError(
                    f"publish to {subject!r}: {len(data)} bytes exceed the server's "
                    f"max_payload of {self._nc.max_payload} bytes",
                    subject=subject,
                    permanent=True,
                ) from exc
            except nats.errors.ConnectionClosedError as exc:
                raise closed_publisher_error(
                    subject, f"the connection is closed{closed_reason(self._nc)}"
                ) from exc
            except nats.errors.Error as exc:
                error = f"publish to {subject!r} failed: {exc}"
                raise PublishError(error, subject=subject) from exc
            confirmed = self._confirmed
            if confirm or (confirmed is not None and subject not in confirmed):
                await self._confirm(subject, wire, data, sent_on)
                if confirmed is not None:
                    confirmed[subject] = None
                    if len(confirmed) > CONFIRMED_SUBJECTS:
                        confirmed.popitem(last=False)
            else:
                self._unconfirmed = True
                if len(data) > self._largest_unconfirmed:
                    self._largest_unconfirmed = len(data)
                    self._unconfirmed_limit = self._nc.max_payload

    def _forget_unconfirmed(self) -> None:
        self._unconfirmed = False
        self._largest_unconfirmed = 0
        self._unconfirmed_limit = 0

    def _reset_unseen(self) -> None:
        """Record an overflow whose ``-ERR`` never reached the client, if none came.

        The server had lowered its ``max_payload`` below a message this publisher sent,
        and closed the connection for it. Its ``-ERR`` may not arrive: a client that
        writes to a connection the server has closed gets a reset, which discards
        what the server sent last. The client reconnected and learned the lower limit;
        everything the :class:`Overflow` path reports then applies.
        """
        if self._refusals.overflows == self._overflows:
            self._refusals.overflowed(
                Overflow(
                    self._unconfirmed_limit or self._largest_unconfirmed,
                    "the server reset the connection; its error did not reach the client",
                )
            )

    async def _after_overflow(self, subject: str) -> None:
        """The server closed the connection for a message over its lowered max_payload.

        Raises:
            MaxPayloadLowered: This publisher sent unconfirmed messages before (some
                may have been lost), naming the new limit once the client reconnected.
        """
        self._overflows = self._refusals.overflows
        overflow = self._refusals.overflow
        if self._unconfirmed and overflow is not None:
            self._forget_unconfirmed()  # reported once
            raise await lost_before_error(self._nc, overflow, subject, FLUSH_TIMEOUT)

    async def _confirm(self, subject: str, wire: dict[str, str], data: bytes, sent_on: int) -> None:
        """Wait until the server has read the message sent on connection ``sent_on``.

        Raises:
            PublishError: The server did not confirm it; the connection dropped after
                it was sent (it may have been lost: ``may_be_stored``); or
                :class:`~goflux.PayloadTooLarge` / :class:`~goflux.MaxPayloadLowered`
                when the server closed the connection for a message over a lowered
                ``max_payload``.
        """
        overflows = self._overflows  # as publish() found them, before sending
        limit = self._nc.max_payload
        try:
            with self._refusals.guard("publish", subject, f"publish to {subject!r}"):
                await flush(self._nc, FLUSH_TIMEOUT)
        except (nats.errors.Error, TimeoutError) as exc:
            raise PublishError(
                f"publish to {subject!r}: the server did not confirm it: {exc}"
                f"{closed_reason(self._nc) if self._nc.is_closed else ''}",
                subject=subject,
                may_be_stored=True,
            ) from exc
        if self._refusals.overflows == overflows and self._nc.stats["reconnects"] > sent_on:
            self._dropped_before_confirmation(subject, wire, data, limit)
        overflow = self._refusals.overflow
        if self._refusals.overflows != overflows and overflow is not None:
            # The server closed the connection meanwhile; the flush went through on the
            # new one, but this message may have been lost on the old one.
            self._overflows = self._refusals.overflows
            self._forget_unconfirmed()
            raise await in_flight_error(
                self._nc,
                overflow,
                subject,
                wire,
                data,
                waiting_for="its confirmation",
                retry="publish it again",
                timeout=FLUSH_TIMEOUT,
            )
        self._forget_unconfirmed()

    def _dropped_before_confirmation(
        self, subject: str, wire: dict[str, str], data: bytes, limit: int
    ) -> None:
        """The connection dropped between sending and confirming, with no ``-ERR`` seen.

        The confirmation came on the next connection. If the message is over the limit
        the server announced on reconnecting, the server closed the connection for it
        (its ``-ERR`` lost to a reset): record that overflow and let it be reported.

        Raises:
            PublishError: The message is within the new limit: it may have been read
                before the connection dropped, or lost (``may_be_stored``).
        """
        try:
            check_size(subject, wire, data, self._nc.max_payload)
        except PayloadTooLarge:
            self._refusals.overflowed(
                Overflow(
                    limit, "the server reset the connection; its error did not reach the client"
                )
            )
            return
        self._forget_unconfirmed()
        raise PublishError(
            f"publish to {subject!r}: the connection dropped before the server confirmed "
            "the message (the client reconnected); it may have been lost: publish it again",
            subject=subject,
            may_be_stored=True,
        )

    async def close(self) -> None:
        """Refuse further publishes and flush what the client still buffers.

        The caller owns the connection; it is flushed (if connected), not closed.
        """
        self._closed = True
        if self._nc.is_connected:
            with contextlib.suppress(nats.errors.Error, TimeoutError):
                await flush(self._nc, FLUSH_TIMEOUT)
