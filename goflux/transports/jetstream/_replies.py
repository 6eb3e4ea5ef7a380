"""PubAcks: what a publish's reply (or its absence) means, and PubAcks awaited in a pipeline.

A reply is a receipt or a refusal (:func:`receipt`, :func:`refused`); no reply is a
missing stream or a timeout. :class:`PubAcks` is a publisher's own reply inbox for
pipelined publishes: each gets a reply subject under one wildcard subscription, and
its future resolves with the receipt, or fails with the server's refusal (its error
code and description, read here: nats-py's own pipelining raises a refusal inside its
reply callback and never resolves the caller's future), or with "no stream" when no
stream captures the subject.
"""

from __future__ import annotations

import asyncio
import decimal
import re
from typing import Final

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from pydantic_core import from_json

from goflux._errors import PublishError
from goflux._lifecycle import closed_publisher_error
from goflux._receipt import PublishReceipt
from goflux.transports._refusals import Refusal, closed_reason
from goflux.transports.jetstream._errors import (
    ExpectationFailed,
    InvalidSchedule,
    StreamFeatureDisabled,
)
from goflux.transports.jetstream._inbox import ReplyInbox
from goflux.transports.jetstream._status import (
    ATOMIC_DISABLED,
    EXPECTED_LAST_MESSAGE_ID,
    EXPECTED_LAST_SEQUENCE,
    EXPECTED_STREAM,
    MESSAGE_HEADERS_TOO_LARGE,
    MESSAGE_TOO_LARGE,
    MSG_COUNTER_BROKEN,
    MSG_COUNTER_DISABLED,
    MSG_COUNTER_HAS_PAYLOAD,
    MSG_COUNTER_INCR_INVALID,
    MSG_COUNTER_INCR_MISSING,
    MSG_SCHEDULES_DISABLED,
    MSG_TTL_DISABLED,
    NO_RESPONDERS,
    ROLLUP_DISABLED,
    SCHEDULE_REFUSALS,
    is_client_error,
)

__all__ = (
    "PubAcks",
    "counter_value",
    "no_stream",
    "receipt",
    "refused",
    "send_error",
    "timeout_error",
)

_DECIMAL: Final = re.compile(r"[+-]?[0-9]+")
# Digits int() reads directly: its limit (sys.set_int_max_str_digits) is 4,300 by
# default and never below 640.
_SHORT: Final = 640

EXPECTATIONS = {
    EXPECTED_STREAM: "stream",
    EXPECTED_LAST_MESSAGE_ID: "last_message_id",
    EXPECTED_LAST_SEQUENCE: "last_sequence",
}
# Refusals of a publish that the stream's settings do not allow: what it asked for,
# the setting that would allow it, and what to do about it ({name}: the stream).
_SET_IT: Final = "set it with ensure_stream(js, name={name!r}, ..., {setting}=True)"
DISABLED: Final = {
    MSG_TTL_DISABLED: (
        "a per-message TTL",
        "allow_msg_ttl",
        _SET_IT + ", unless it is a counter stream (allow_msg_counter): per-message TTLs "
        "and counters cannot be combined in one stream",
    ),
    ATOMIC_DISABLED: ("an atomic batch", "allow_atomic", _SET_IT),
    ROLLUP_DISABLED: ("a rollup", "allow_rollup_hdrs", _SET_IT),
    MSG_SCHEDULES_DISABLED: ("a message schedule", "allow_msg_schedules", _SET_IT),
    MSG_COUNTER_DISABLED: (
        "a counter increment (Nats-Incr)",
        "allow_msg_counter",
        "{setting} can only be given when a stream is created, never changed on an "
        "existing stream: count in a new stream created with {setting}=True",
    ),
}
# Refusals of a publish to a counter stream (ADR-49) that is not a valid increment:
# what is wrong, in words naming the stream ({name}) and subject ({subject}).
COUNTER_REFUSALS: Final = {
    MSG_COUNTER_INCR_MISSING: (
        "stream {name!r} is a counter stream: every publish needs a Nats-Incr header and "
        "an empty body; use Counter.add"
    ),
    MSG_COUNTER_HAS_PAYLOAD: (
        "stream {name!r} is a counter stream: an increment (Nats-Incr) has an empty body; "
        "use Counter.add"
    ),
    MSG_COUNTER_INCR_INVALID: (
        "stream {name!r} refused the increment: Nats-Incr is a decimal integer ('+5', "
        "'-3', '0'), and an increment carries no Nats-Rollup and no expected stream, "
        "last sequence or last message ID; use Counter.add"
    ),
    MSG_COUNTER_BROKEN: (
        "the counter {subject!r} of stream {name!r} is broken: its last message is not "
        'a counter value ({{"val": "<decimal>"}}); purge the subject to start it again'
    ),
}
# Refusals that a retry of the same message cannot overcome whatever their status
# code: the message or its headers exceed the stream's maximum size.
PERMANENT_REFUSALS = frozenset({MESSAGE_TOO_LARGE, MESSAGE_HEADERS_TOO_LARGE})


def refused(
    subject: str,
    code: int | None,
    err_code: int | None,
    description: str,
    stream: str | None = None,
) -> PublishError:
    """The error for a PubAck that refuses a publish to ``subject`` (nothing stored)."""
    disabled = DISABLED.get(err_code) if err_code is not None else None
    if disabled is not None:
        what, setting, advice = disabled
        name = stream or "(unknown)"
        return StreamFeatureDisabled(
            f"publish to {subject!r} refused, nothing stored: stream {name!r} does not "
            f"allow {what} ({description}); {advice.format(name=name, setting=setting)}",
            subject=subject,
            stream=name,
            setting=setting,
        )
    counter = COUNTER_REFUSALS.get(err_code) if err_code is not None else None
    if counter is not None:
        name = stream or "(unknown)"
        return PublishError(
            f"publish to {subject!r} refused, nothing stored: "
            f"{counter.format(name=name, subject=subject)} ({description})",
            subject=subject,
            permanent=True,
            err_code=err_code,
        )
    reason = SCHEDULE_REFUSALS.get(err_code) if err_code is not None else None
    if reason is not None:
        name = stream or "(unknown)"
        return InvalidSchedule(
            f"publish to {subject!r} refused, nothing stored: stream {name!r} refused its "
            f"message schedule ({description})",
            subject=subject,
            stream=name,
            reason=reason,
            err_code=err_code,
        )
    expectation = EXPECTATIONS.get(err_code) if err_code is not None else None
    if expectation is not None:
        return ExpectationFailed(
            f"publish to {subject!r} refused, nothing stored: {description}",
            subject=subject,
            expectation=expectation,
        )
    # A 4xx refusal (a sealed stream, a bad request) cannot succeed on retry; a 503
    # (a full stream, JetStream starting up) may.
    permanent = err_code in PERMANENT_REFUSALS or is_client_error(code)
    return PublishError(
        f"publish to {subject!r} refused: {description}",
        subject=subject,
        permanent=permanent,
        err_code=err_code,
    )


def counter_value(text: object) -> int:
    """The exact int of a counter value as the server writes it: a decimal string.

    The server keeps counters as arbitrary-precision integers and writes them in
    decimal (``"val": "-12"``); they are parsed as Python ints, never floats, at any
    length (through :class:`decimal.Decimal`, exact and free of Python's 4,300-digit
    limit on ``int(str)``).

    Raises:
        ValueError: ``text`` is not a decimal string.
    """
    if not isinstance(text, str) or not _DECIMAL.fullmatch(text):
        got = repr(text[:100]) if isinstance(text, str) else type(text).__name__
        raise ValueError(f"a counter value is a decimal string, got {got}")
    if len(text) <= _SHORT:
        return int(text)
    return int(decimal.Decimal(text))  # exact: a Decimal is built from a str digit by digit


def receipt(data: bytes, subject: str) -> PublishReceipt:
    """The receipt a PubAck gives for a publish to ``subject``.

    Raises:
        PublishError: The PubAck refuses the publish, or cannot be read.
    """
    try:
        reply = from_json(data)
    except ValueError as exc:
        raise PublishError(f"publish to {subject!r}: unreadable PubAck", subject=subject) from exc
    try:
        error = reply.get("error")
        if error is not None:
            raise refused(
                subject,
                error.get("code"),
                error.get("err_code"),
                error.get("description", ""),
                reply.get("stream") or None,
            )
        return PublishReceipt(
            stream=reply["stream"],
            sequence=int(reply["seq"]),
            duplicate=bool(reply.get("duplicate")),
            domain=reply.get("domain"),
            value=None if reply.get("val") is None else counter_value(reply["val"]),
        )
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        # Something answers on the subject that is not JetStream (a core responder).
        raise PublishError(
            f"publish to {subject!r}: the reply is not a PubAck: {bytes(data[:100])!r}; "
            "is something other than a stream listening on this subject?",
            subject=subject,
            may_be_stored=True,
        ) from exc


def no_stream(subject: str) -> PublishError:
    """The error for a publish to ``subject`` that no stream answered (no responders).

    Either no stream captures the subject, or its stream has no leader at the moment
    (an election in a cluster): the server cannot tell the two apart, so neither can
    this error; it is not permanent, and a retry helps in the second case.
    """
    return PublishError(
        f"publish to {subject!r}: no stream answered: none captures this subject, or "
        "its stream has no leader at the moment (an election)",
        subject=subject,
    )


def timeout_error(subject: str, timeout: float, nc: Client) -> PublishError:
    """The error for a publish to ``subject`` whose PubAck did not come in ``timeout``."""
    if nc.is_closed:  # closed while waiting: say why, in the server's words
        # May have been stored, so not permanent: a retry fails at once (the
        # connection is closed), permanently, or on a new connection is de-duplicated.
        return PublishError(
            f"publish to {subject!r}: the connection closed before the PubAck came"
            f"{closed_reason(nc)}; the message may have been stored",
            subject=subject,
            may_be_stored=True,
        )
    return PublishError(
        f"publish to {subject!r}: no PubAck within {timeout}s; the message may still have "
        "been stored; publish it again with the same message_id so the server de-duplicates it",
        subject=subject,
        may_be_stored=True,
    )


def send_error(subject: str, exc: BaseException, nc: Client) -> PublishError:
    """The error for a publish to ``subject`` that nats-py failed with ``exc``."""
    if isinstance(exc, nats.js.errors.NoStreamResponseError | nats.errors.NoRespondersError):
        return no_stream(subject)
    if isinstance(exc, nats.js.errors.APIError):
        return refused(subject, exc.code, exc.err_code, exc.description or str(exc))
    if isinstance(exc, nats.errors.ConnectionClosedError):
        return closed_publisher_error(subject, f"the connection is closed{closed_reason(nc)}")
    permanent = isinstance(exc, nats.errors.MaxPayloadError)
    return PublishError(
        f"publish to {subject!r} failed: {exc}", subject=subject, permanent=permanent
    )


class PubAcks:
    """Reply subjects and futures for PubAcks awaited in a pipeline."""

    __slots__ = ("_inbox", "_pending", "_refused")

    def __init__(self, nc: Client) -> None:
        self._inbox = ReplyInbox(nc, self._on_reply, self._on_refused)
        self._pending: dict[str, tuple[asyncio.Future[PublishReceipt], str]] = {}
        self._refused: Refusal | None = None

    async def open(self) -> None:
        """Subscribe the inbox (once; again after :meth:`close`).

        Raises:
            PermissionDenied: The server refused the inbox.
            nats.errors.Error: The connection is closed or failed.
        """
        if self._refused is not None:
            raise self._refused.error("the inbox for PubAcks")
        await self._inbox.open()

    def expect(self, subject: str) -> tuple[str, asyncio.Future[PublishReceipt]]:
        """A reply subject for a publish to ``subject``, and the future of its receipt."""
        token, reply = self._inbox.new_token()
        future: asyncio.Future[PublishReceipt] = asyncio.get_running_loop().create_future()
        self._pending[token] = (future, subject)
        return reply, future

    def forget(self, future: asyncio.Future[PublishReceipt], reply: str) -> None:
        """Stop waiting for the PubAck sent to ``reply`` (a late one is ignored)."""
        self._pending.pop(self._inbox.token_of(reply), None)
        if not future.done():
            future.cancel()

    def fail(self, reply: str, error: PublishError) -> None:
        """Fail the publish awaiting its PubAck on ``reply`` (a late PubAck is ignored)."""
        entry = self._pending.pop(self._inbox.token_of(reply), None)
        if entry is not None and not entry[0].done():
            entry[0].set_exception(error)

    def _on_refused(self, refusal: Refusal) -> None:
        """The server refused the inbox: no PubAck can come; every waiting publish fails.

        The publishes themselves went out and may have been stored.
        """
        self._refused = refusal
        pending, self._pending = self._pending, {}
        for future, subject in pending.values():
            if not future.done():
                what = f"publish to {subject!r}: the inbox for its PubAck"
                future.set_exception(refusal.error(what, may_be_stored=True))

    async def _on_reply(self, token: str, msg: Msg) -> None:
        entry = self._pending.pop(token, None)
        if entry is None:
            return  # late: its publish was given up
        future, subject = entry
        if future.done():
            return
        headers = msg.headers
        if headers and headers.get("Status") == NO_RESPONDERS:
            future.set_exception(no_stream(subject))
            return
        try:
            future.set_result(receipt(msg.data, subject))
        except PublishError as refused:  # receipt() raises nothing else
            future.set_exception(refused)

    async def close(self) -> None:
        """Unsubscribe; publishes still waiting get "cancelled"."""
        for future, _ in self._pending.values():
            if not future.done():
                future.cancel()
        self._pending.clear()
        await self._inbox.close()
