"""Why no stream answered a publish: no stream for the subject, or no JetStream at all.

A publish nobody answers gets nats-server's no-responders status, whether no stream
captures its subject, its stream has no leader for a moment, or the account has no
JetStream. The server's INFO says only that the server runs JetStream (for some
account), so on that failure, and only then, :func:`no_stream_error` asks the
JetStream API (``INFO``) once: an account without JetStream gets
:class:`~goflux.transports.jetstream.JetStreamUnavailable`, saying so.
"""

from __future__ import annotations

import nats.errors
from nats.js import JetStreamContext
from nats.js.errors import APIError, ServiceUnavailableError

from goflux._errors import PublishError
from goflux.transports.jetstream._api import api_request
from goflux.transports.jetstream._errors import JetStreamUnavailable
from goflux.transports.jetstream._replies import no_stream
from goflux.transports.jetstream._status import (
    JETSTREAM_NOT_ENABLED,
    JETSTREAM_NOT_ENABLED_FOR_ACCOUNT,
)

__all__ = ("is_no_stream", "jetstream_refused", "no_stream_error", "unavailable")


def is_no_stream(error: BaseException) -> bool:
    """Whether ``error`` is the "no stream answered" error of :func:`no_stream`."""
    return (
        type(error) is PublishError
        and error.err_code is None
        and error.args == no_stream(error.subject).args
    )


async def jetstream_refused(js: JetStreamContext) -> tuple[str, int | None] | None:
    """Why the account cannot use JetStream (the reason, its err_code), or None.

    None when it can, or when the JetStream API could not tell (no answer in time).
    Costs one JetStream API request.
    """
    try:
        await api_request(js, "INFO")
    except ServiceUnavailableError:  # nothing answers on the JetStream API at all
        return (
            "nothing answers on the JetStream API: JetStream is not enabled for this "
            "account or server (or the JetStream domain is wrong)",
            None,
        )
    except APIError as exc:
        if exc.err_code in (JETSTREAM_NOT_ENABLED_FOR_ACCOUNT, JETSTREAM_NOT_ENABLED):
            where = "account" if exc.err_code == JETSTREAM_NOT_ENABLED_FOR_ACCOUNT else "server"
            return (
                f"JetStream is not enabled for this {where} (the server said: "
                f"{exc.description or exc})",
                exc.err_code,
            )
    except (nats.errors.Error, TimeoutError, ValueError):
        pass  # cannot tell
    return None


def unavailable(subject: str, reason: str, err_code: int | None) -> JetStreamUnavailable:
    """The error for a publish to ``subject`` of an account without JetStream."""
    return JetStreamUnavailable(
        f"publish to {subject!r}: {reason}; nothing was stored",
        err_code=err_code,
        subject=subject,
    )


async def no_stream_error(js: JetStreamContext, subject: str) -> PublishError:
    """The error for a publish to ``subject`` that nobody answered.

    :class:`JetStreamUnavailable` if the account (or the server) has no JetStream,
    else the "no stream answered" error.
    """
    refusal = await jetstream_refused(js)
    if refusal is None:
        return no_stream(subject)
    return unavailable(subject, *refusal)
