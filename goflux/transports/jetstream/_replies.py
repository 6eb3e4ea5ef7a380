"""What a JetStream publish's reply (or its absence) means: a receipt or a PublishError."""

from __future__ import annotations

import nats.errors
import nats.js.errors
from nats.aio.client import Client
from pydantic_core import from_json

from goflux._errors import ExpectationFailed, PublishError, StreamFeatureDisabled
from goflux._lifecycle import closed_publisher_error
from goflux._receipt import PublishReceipt
from goflux.transports._refusals import closed_reason

__all__ = ("no_stream", "receipt", "refused", "send_error", "timeout_error")

EXPECTATIONS = {
    10060: "stream",
    10070: "last_message_id",
    10071: "last_sequence",
}
# Refusals of a publish that the stream's settings do not allow: what it asked for,
# and the setting that would allow it.
DISABLED = {
    10166: ("a per-message TTL", "allow_msg_ttl"),
    10174: ("an atomic batch", "allow_atomic"),
    10111: ("a rollup", "allow_rollup_hdrs"),
    10188: ("a message schedule", "allow_msg_schedules"),
}
# Refusals that a retry of the same message cannot overcome whatever their status
# code: the message or its headers exceed the stream's maximum size.
PERMANENT_REFUSALS = frozenset({10054, 10097})


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
        what, setting = disabled
        name = stream or "(unknown)"
        return StreamFeatureDisabled(
            f"publish to {subject!r} refused, nothing stored: stream {name!r} does not "
            f"allow {what} ({description}); set it with "
            f"ensure_stream(js, name={name!r}, ..., {setting}=True)",
            subject=subject,
            stream=name,
            setting=setting,
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
    permanent = err_code in PERMANENT_REFUSALS or (code is not None and 400 <= code < 500)
    return PublishError(
        f"publish to {subject!r} refused: {description}",
        subject=subject,
        permanent=permanent,
        err_code=err_code,
    )


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
        return PublishError(
            f"publish to {subject!r}: the connection closed before the PubAck came"
            f"{closed_reason(nc)}; the message may have been stored",
            subject=subject,
            may_be_stored=True,
            permanent=True,
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
