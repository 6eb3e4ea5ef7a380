"""What the publisher and requester share: the httpx client, one POST, its failures."""

from __future__ import annotations

import asyncio
from typing import Final
from urllib.parse import urlsplit

import httpx
from opentelemetry.trace import SpanKind

from goflux._codecs import content_type_of
from goflux._otel.scopes import NullScope, PublishScope, PublishScopes
from goflux._otel.semconv import HTTP_REQUEST_METHOD, HTTP_RESPONSE_STATUS_CODE, URL_FULL
from goflux._otel.telemetry import Telemetry
from goflux._urls import redact_url
from goflux.transports.http._system import SYSTEM
from goflux.transports.http._wire import (
    check_base_url,
    first_line,
    outgoing_headers,
    parse_retry_after,
    target_url,
)

__all__ = ("DEFAULT_TIMEOUT", "MAX_ANSWER", "Answer", "Poster", "Unsent")

DEFAULT_TIMEOUT: Final = 10.0  # seconds, as Go goflux's default client
MAX_ANSWER: Final = 1 << 20  # bytes of an answer read (Go goflux reads 1 MiB)
_MAX_ERROR_BODY: Final = 64 * 1024  # bytes of an error answer read for its first line
_LARGE_BODY: Final = 1 << 20  # Go goflux's default body limit: a body larger may be refused
# Seconds a connection of our own client may idle and still be sent on (httpx checks
# at each send and replaces an older one): well below the 5 s after which uvicorn,
# Node and hypercorn close one by default. Were both 5 s (httpx's default), a POST sent
# as the server closes the connection would fail with a ReadError, maybe handled. The
# server's 5 s start as it sends an answer, ours once we have read it: a client whose
# event loop stalls 1 s in between, with 4 s here, still met the close.
_IDLE_SECONDS: Final = 2.0


class Unsent(Exception):
    """A POST failed before an answer came.

    Attributes:
        reason: What happened, for the caller's error message.
        may_be_stored: The request may have reached the endpoint (it went out, and
            the answer did not come in time or the connection dropped meanwhile).
        timed_out: No answer within the timeout.
    """

    def __init__(
        self, reason: str, *, may_be_stored: bool, timed_out: bool, closed: bool = False
    ) -> None:
        super().__init__(reason)
        self.reason = reason
        self.may_be_stored = may_be_stored
        self.timed_out = timed_out
        self.closed = closed
        """The client was closed: no attempt can succeed."""


def _os_cause(exc: BaseException) -> str:
    """``" (Connection refused)"``: the operating system's words, found in the chain."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.strerror:
            return f" ({seen.strerror})"
        for inner in getattr(seen, "exceptions", ()):  # an ExceptionGroup of attempts
            found = _os_cause(inner)
            if found:
                return found
        seen = seen.__cause__ or seen.__context__
    return ""


def _named(exc: Exception) -> str:
    """``Type: text`` of an httpx error, or the type alone when it says nothing."""
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Answer:
    """The endpoint's answer: status, body (bounded) and what an error needs."""

    __slots__ = ("body", "complete", "headers", "status")

    def __init__(self, status: int, body: bytes, headers: httpx.Headers, complete: bool) -> None:
        self.status = status
        self.body = body
        self.headers = headers
        self.complete = complete
        """False when the body was longer than what was read of it."""

    @property
    def ok(self) -> bool:
        """Whether the status is 2xx."""
        return 200 <= self.status < 300

    @property
    def detail(self) -> str:
        """The first line of the body."""
        return first_line(self.body)

    @property
    def retry_after(self) -> float | None:
        """Seconds ``Retry-After`` asks to wait, or None."""
        return parse_retry_after(self.headers.get("retry-after"))

    @property
    def redirected_to(self) -> str | None:
        """Where a 3xx answer (a redirect the client did not follow) points, or None."""
        if 300 <= self.status < 400:
            return redact_url(self.headers.get("location", "?"))
        return None

    def why(self) -> str:
        """The answer as an error message tells it: status and first line (or redirect)."""
        target = self.redirected_to
        if target is not None:
            return f"{self.status}, a redirect to {target} (not followed)"
        detail = self.detail
        return f"{self.status}: {detail}" if detail else str(self.status)


class Poster:
    """POSTs encoded bodies to ``{base_url}/{subject}`` with an httpx client.

    Args:
        base_url: The endpoint root.
        codec: The codec whose content type is sent.
        client: An ``httpx.AsyncClient`` the caller owns, or None for one of our own
            (closed by :meth:`close`).
        timeout: Seconds a POST may take in all (connect, send, answer).

    Raises:
        ValueError: ``base_url`` is no http(s) URL or ``timeout`` is not positive.
    """

    def __init__(
        self, base_url: str, codec: object, client: httpx.AsyncClient | None, timeout: float
    ) -> None:
        if not timeout > 0:
            raise ValueError(f"timeout must be > 0 seconds, got {timeout}")
        self.base_url = check_base_url(base_url)
        self.shown_base_url = redact_url(self.base_url)
        parts = urlsplit(self.base_url)
        self.host = parts.hostname or ""
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.content_type = content_type_of(codec) or "application/json"
        self._owned = client is None
        # Like Go's default client, follow redirects (307/308 resend the body).
        self.client = client if client is not None else _own_client()
        self.timeout = httpx.Timeout(timeout)
        self.seconds = timeout

    def scopes(self, telemetry: Telemetry | None, kind: SpanKind) -> PublishScopes:
        """The publish scopes of a client posting here (``server.*`` from the URL)."""
        return PublishScopes(
            Telemetry.or_default(telemetry),
            SYSTEM,
            server_address=self.host,
            server_port=self.port,
            kind=kind,
        )

    def url(self, subject: str) -> str:
        """Where a message to ``subject`` goes."""
        return target_url(self.base_url, subject)

    async def post(
        self,
        url: str,
        data: bytes,
        wire: dict[str, str],
        span: PublishScope | NullScope,
        timeout: float | None = None,
        answer_limit: int = MAX_ANSWER,
    ) -> Answer:
        """POST ``data`` with goflux's transport headers ``wire``; return the answer.

        The body size, the URL, the method and the answer's status are recorded on
        ``span``. At most ``answer_limit`` bytes of a 2xx answer's body are read (64 KiB of an
        error's); :attr:`Answer.complete` says whether that was all of it.

        Raises:
            Unsent: No answer came (refused, unreachable, timed out, dropped).
        """
        span.set_body_size(len(data))
        recording = span.recording
        if recording:
            span.set_attributes({URL_FULL: redact_url(url), HTTP_REQUEST_METHOD: "POST"})
        client = self.client
        if client.is_closed:
            raise Unsent(
                "its httpx client is closed", may_be_stored=False, timed_out=False, closed=True
            )
        wait = self.seconds if timeout is None else timeout
        request = client.build_request(
            "POST",
            url,
            content=data,
            headers=outgoing_headers(wire, self.content_type),
            timeout=self.timeout if timeout is None else httpx.Timeout(timeout),
        )
        try:
            # httpx's timeout bounds each step (connect, each read); this bounds all.
            async with asyncio.timeout(wait):
                response = await client.send(request, stream=True)
                try:
                    if recording:
                        span.set_attributes({HTTP_RESPONSE_STATUS_CODE: response.status_code})
                    ok = 200 <= response.status_code < 300
                    limit = answer_limit if ok else _MAX_ERROR_BODY
                    body, complete = await _read(response, limit)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.HTTPError) as exc:
            raise _unsent(exc, wait, len(data)) from exc
        except RuntimeError as exc:  # httpx: the client was closed meanwhile
            if not client.is_closed:
                raise
            raise Unsent(
                "its httpx client is closed", may_be_stored=False, timed_out=False, closed=True
            ) from exc
        return Answer(response.status_code, body, response.headers, complete)

    async def close(self) -> None:
        """Close the client if it is our own."""
        if self._owned:
            await self.client.aclose()


def _own_client() -> httpx.AsyncClient:
    """The client a :class:`Poster` makes when given none.

    It follows redirects and sends on no connection idle longer than
    :data:`_IDLE_SECONDS` (it connects anew), well before a server's 5 s keep-alive
    closes it.
    """
    limits = httpx.Limits(  # httpx's defaults but for the idle time
        max_connections=100, max_keepalive_connections=20, keepalive_expiry=_IDLE_SECONDS
    )
    return httpx.AsyncClient(follow_redirects=True, limits=limits)


def _unsent(exc: Exception, wait: float, size: int) -> Unsent:  # noqa: PLR0911 - one per kind
    """What a POST that got no answer tells: why, and whether the request may have gone."""
    if isinstance(exc, TimeoutError):  # the whole call's deadline
        return Unsent(f"no complete answer within {wait}s", may_be_stored=True, timed_out=True)
    if isinstance(exc, httpx.ConnectTimeout):
        return Unsent(f"no connection within {wait}s", may_be_stored=False, timed_out=True)
    if isinstance(exc, httpx.PoolTimeout):
        return Unsent(
            f"no free connection in the client's pool within {wait}s",
            may_be_stored=False,
            timed_out=True,
        )
    if isinstance(exc, httpx.TimeoutException):
        return Unsent(f"no answer within {wait}s", may_be_stored=True, timed_out=True)
    if isinstance(exc, httpx.ConnectError):
        return Unsent(
            f"cannot connect: {_named(exc)}{_os_cause(exc)}", may_be_stored=False, timed_out=False
        )
    if isinstance(exc, httpx.ReadError | httpx.WriteError | httpx.RemoteProtocolError):
        hint = (
            f", with {size} bytes to send: the endpoint may refuse bodies this large"
            if size > _LARGE_BODY
            else ""
        )
        return Unsent(
            f"the connection closed before an answer came ({_named(exc)}){hint}",
            may_be_stored=True,
            timed_out=False,
        )
    return Unsent(_named(exc), may_be_stored=True, timed_out=False)


async def _read(response: httpx.Response, limit: int) -> tuple[bytes, bool]:
    """Up to ``limit`` bytes of the body, and whether that was all of it."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > limit:
            return b"".join(chunks)[:limit], False
    return chunks[0] if len(chunks) == 1 else b"".join(chunks), True
