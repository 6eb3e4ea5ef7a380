"""Reading a request's body within its limits, and sending goflux's answers (Starlette)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Final

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from goflux.transports.http._wire import ERROR_CONTENT_TYPE, error_body

__all__ = (
    "BodyRefused",
    "RawHeaders",
    "check_encoding",
    "read_body",
    "send_empty",
    "send_error",
    "send_reply",
)

_NOSNIFF: Final = {"x-content-type-options": "nosniff"}


# The most bytes of a refused body the server reads and discards after the answer, so
# that the sender (which writes its whole body before it reads) gets the answer and not
# a reset connection; a body declared larger gets the answer and the connection closed.
_DISCARDED_AT_MOST: Final = 16 << 20


class BodyRefused(Exception):
    """The request's body was not taken: too large, too slow, compressed, or the client left.

    Attributes:
        status: The answer's status (413, 408, 415 or 400).
        text: The answer's text.
        close: Close the connection after the answer (rather than discard the rest
            of the body): the client is too slow, or declared far too much.
        headers: Headers the answer carries beside goflux's own, or None.
    """

    def __init__(
        self,
        status: int,
        text: str,
        *,
        close: bool = False,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(text)
        self.status = status
        self.text = text
        self.close = close
        self.headers = headers


# RFC 7694: a server that refuses a request's content coding answers 415 and names the
# codings it takes in Accept-Encoding.
_IDENTITY_ONLY: Final = {"accept-encoding": "identity"}
_SHOWN_CODING: Final = 64  # characters of a refused Content-Encoding the answer repeats


def check_encoding(scope: Scope) -> None:
    """Refuse a body sent with a ``Content-Encoding`` other than ``identity``.

    goflux reads a body as the codec's bytes exactly: a sender compresses with a
    compressing codec (``pipe(JsonCodec(T), Gzip())``, sent as ``application/gzip``),
    never with an HTTP content coding, which the codec would not undo.

    Raises:
        BodyRefused: 415, naming the encoding, with ``Accept-Encoding: identity``.
    """
    for name, value in scope["headers"]:
        if name != b"content-encoding":
            continue
        text = value.decode("latin-1").strip()
        codings = [c.strip().lower() for c in text.split(",")]
        if any(c and c != "identity" for c in codings):
            if len(text) > _SHOWN_CODING:
                text = text[: _SHOWN_CODING - 1] + "…"
            raise BodyRefused(
                415,
                f"unsupported Content-Encoding {text!r}: the body must be the "
                "codec's bytes as they are (identity); compress with the codec, not HTTP",
                headers=_IDENTITY_ONLY,
            )


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope["headers"]:
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None


async def read_body(scope: Scope, receive: Receive, limit: int, timeout: float) -> bytes:
    """The request's body, refused as soon as it is known to exceed ``limit`` bytes.

    A declared ``Content-Length`` over the limit is refused before a byte is read
    (a client waiting for ``100 Continue`` sends nothing); a body without one is
    read until it passes the limit. Nothing past the limit is kept: the server
    discards the rest of a refused body of a declared length (up to 16 MiB more, so
    that a client that writes its whole body before reading gets the 413), or closes
    the connection (more than that, or no length declared).
    The whole body must arrive within ``timeout`` seconds, so a slow client cannot
    hold a handler's slot.

    Raises:
        BodyRefused: 413 over the limit, 408 too slow, 400 the client disconnected.
    """
    declared = _declared_length(scope)
    if declared is not None and declared > limit:
        raise BodyRefused(
            413,
            f"request body of {declared} bytes exceeds {limit} bytes",
            close=declared - limit > _DISCARDED_AT_MOST,
        )
    chunks: list[bytes] = []
    size = 0
    try:
        async with asyncio.timeout(timeout):
            async for chunk in Request(scope, receive).stream():
                size += len(chunk)
                if size > limit:  # no length declared: the rest may never end
                    raise BodyRefused(413, f"request body exceeds {limit} bytes", close=True)
                if chunk:
                    chunks.append(chunk)
    except TimeoutError as exc:
        raise BodyRefused(408, f"request body not received within {timeout}s", close=True) from exc
    except ClientDisconnect as exc:
        raise BodyRefused(400, "the client disconnected before sending the body") from exc
    return chunks[0] if len(chunks) == 1 else b"".join(chunks)


RawHeaders = list[tuple[bytes, bytes]]
"""Header lines as they go on the wire (sent as they are)."""


async def send_error(
    scope: Scope,
    receive: Receive,
    send: Send,
    status: int,
    text: str,
    headers: Mapping[str, str] | None = None,
    raw: RawHeaders | None = None,
) -> None:
    """Answer ``status`` with ``text`` as Go's ``http.Error`` does."""
    all_headers = {**_NOSNIFF, **headers} if headers else _NOSNIFF
    response = Response(
        error_body(text), status, headers=all_headers, media_type=ERROR_CONTENT_TYPE
    )
    if raw:
        response.raw_headers.extend(raw)
    await response(scope, receive, send)


async def send_empty(
    scope: Scope, receive: Receive, send: Send, headers: Mapping[str, str] | None = None
) -> None:
    """Answer 204 No Content."""
    await Response(None, 204, headers=headers)(scope, receive, send)


async def send_reply(
    scope: Scope,
    receive: Receive,
    send: Send,
    data: bytes,
    content_type: str,
    raw: RawHeaders | None = None,
) -> None:
    """Answer 200 with an encoded reply."""
    response = Response(data, 200, media_type=content_type)
    if raw:
        response.raw_headers.extend(raw)
    await response(scope, receive, send)
