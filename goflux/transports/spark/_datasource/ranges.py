"""Read a range of stream sequences ``[start, end)`` with a short-lived pull consumer.

A Spark task reads its part of a micro-batch here: an ephemeral, unacknowledged,
in-memory consumer starts at ``start`` (with the query's subject filters), and the
task asks for messages with its own ``no_wait`` pull requests, received by a message
callback (nats-py's ``fetch()`` costs about three times as much per message). The
range is done at the first message at or past ``end``, at the last message of the
range, when the consumer reports nothing pending, or when the server answers that no
messages are left. One pull request is outstanding at a time (a second ``no_wait``
request while one is pending is refused with ``408 Requests Pending``), the next one
sent as soon as the previous one is filled, while fewer than two chunks wait to be
taken: memory stays bounded however slowly Spark consumes the rows.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Sequence
from typing import Final, NamedTuple

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from goflux._errors import TransportError
from goflux.transports.jetstream._acker import ack_tokens
from goflux.transports.jetstream._errors import StreamNotFound

__all__ = ("RangeReader", "StreamBounds", "stream_bounds")

_NO_MESSAGES: Final = "404"
_REQUEST_TIMEOUT: Final = "408"
_HEARTBEAT: Final = "100"
_NO_RESPONDERS: Final = "503"
INACTIVE_THRESHOLD: Final = 300.0
_MAX_EMPTY_PULLS: Final = 10


class StreamBounds(NamedTuple):
    """A stream's first and last sequence (``first > last`` when it is empty).

    ``created`` tells a stream from another one created later under the same name.
    """

    first: int
    last: int
    created: str = ""
    retention: str = "limits"


async def stream_bounds(nc: Client, stream: str, *, timeout: float = 5.0) -> StreamBounds:
    """Return the first and last sequence of ``stream``.

    Raises:
        StreamNotFound: The stream does not exist.
        TransportError: The server did not answer.
    """
    try:
        info = await nc.jetstream(timeout=timeout).stream_info(stream)
    except NotFoundError as exc:
        raise StreamNotFound(f"stream {stream!r} not found") from exc
    except (TimeoutError, nats.errors.Error) as exc:
        raise TransportError(f"cannot read stream {stream!r}: {exc}") from exc
    first, last = info.state.first_seq, info.state.last_seq
    if last == 0:  # never held a message
        first = 1
    retention = info.config.retention
    return StreamBounds(
        first,
        last,
        str(getattr(info, "created", "") or ""),
        str(getattr(retention, "value", retention) or "limits"),
    )


class RangeReader:
    """Reads stream sequences ``[start, end)`` in chunks of up to ``chunk`` messages.

    Use ``await open()``, then ``await next_chunk()`` until it returns an empty list,
    then ``await close()``.
    """

    def __init__(
        self,
        nc: Client,
        stream: str,
        start: int,
        end: int,
        *,
        filters: Sequence[str] = (),
        chunk: int = 2_000,
        idle_timeout: float = 30.0,
    ) -> None:
        if start < 1 or end < start:
            raise ValueError(f"bad sequence range [{start}, {end})")
        if chunk < 1:
            raise ValueError(f"chunk must be >= 1, got {chunk}")
        self._nc = nc
        self._stream = stream
        self._start = start
        self._end = end
        self._filters = list(filters)
        self._chunk = chunk
        self._idle_timeout = idle_timeout
        self._buffer: list[Msg] = []
        self._ready = asyncio.Event()
        self._done = end == start
        self._failure: BaseException | None = None
        self._expected = 0  # messages the outstanding pull request may still bring
        self._empty_pulls = 0  # consecutive pull requests ended without a message
        self._last_arrival = 0.0  # time.monotonic() of the last message
        self._next_seq = start
        self._consumer: str | None = None
        self._inbox: Subscription | None = None
        self._pull_subject = ""

    async def open(self) -> None:
        """Create the consumer and send the first pull requests.

        Raises:
            StreamNotFound: The stream does not exist.
            TransportError: The consumer could not be created.
        """
        if self._done:
            return
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE,
            opt_start_seq=self._start,
            ack_policy=AckPolicy.NONE,
            # Spark may take long over a chunk before asking for the next; the server
            # removes the consumer after this long idle (or after a crashed task).
            inactive_threshold=INACTIVE_THRESHOLD,
            mem_storage=True,
            num_replicas=1,
        )
        if len(self._filters) == 1:
            config.filter_subject = self._filters[0]
        elif self._filters:
            config.filter_subjects = self._filters
        try:
            info = await self._nc.jetstream().add_consumer(self._stream, config)
        except NotFoundError as exc:
            raise StreamNotFound(f"stream {self._stream!r} not found") from exc
        except (TimeoutError, nats.errors.Error) as exc:
            raise TransportError(
                f"cannot create a reader on stream {self._stream!r}: {exc}"
            ) from exc
        self._consumer = info.name
        self._pull_subject = f"$JS.API.CONSUMER.MSG.NEXT.{self._stream}.{info.name}"
        if info.num_pending == 0:
            self._done = True
            return
        self._inbox = await self._nc.subscribe(self._nc.new_inbox(), cb=self._on_message)
        await self._pull()

    async def _pull(self) -> None:
        """Send the next pull request, unless one is outstanding or enough is buffered."""
        if (
            self._inbox is None
            or self._done
            or self._expected > 0
            or len(self._buffer) >= 2 * self._chunk
        ):
            return
        left = self._end - self._next_seq  # sequences, an upper bound of messages
        if left <= 0:
            return
        batch = min(self._chunk, left)
        request = json.dumps({"batch": batch, "no_wait": True}).encode()
        self._expected = batch
        await self._nc.publish(self._pull_subject, request, reply=self._inbox.subject)

    async def _on_message(self, msg: Msg) -> None:
        if self._done:
            return
        reply = msg.reply
        if not reply:
            await self._on_status(msg)
            return
        tokens, offset = ack_tokens(reply)
        seq = int(tokens[offset + 3])
        self._expected -= 1
        self._empty_pulls = 0
        self._last_arrival = time.monotonic()
        if seq >= self._end:
            self._finish()
            return
        self._next_seq = seq + 1
        self._buffer.append(msg)
        if seq == self._end - 1 or tokens[offset + 6] == "0":
            self._finish()
            return
        if len(self._buffer) >= self._chunk:
            self._ready.set()
        if self._expected == 0:
            await self._pull()

    async def _on_status(self, msg: Msg) -> None:
        status = (msg.headers or {}).get("Status")
        if status == _HEARTBEAT:
            return
        if status == _NO_MESSAGES:
            # The only outstanding no_wait request found nothing more: the consumer has
            # nothing pending, and the range lies in the past.
            self._finish()
            return
        if status == _REQUEST_TIMEOUT:
            # The request ended early (e.g. "Requests Pending"): ask again, but do not
            # spin on a server that keeps refusing.
            self._expected = 0
            self._empty_pulls += 1
            if self._empty_pulls <= _MAX_EMPTY_PULLS:
                await self._pull()
                return
        if status == _NO_RESPONDERS:
            why = (
                "its reader consumer is gone (deleted, or removed after "
                f"{INACTIVE_THRESHOLD:g} s without a pull request)"
            )
        else:
            description = (msg.headers or {}).get("Description", "")
            why = f"the server ended the pull with status {status} {description}".rstrip()
        self._failure = TransportError(
            f"reading stream {self._stream!r} at sequence {self._next_seq}: {why}"
        )
        self._finish()

    def _finish(self) -> None:
        self._done = True
        self._ready.set()

    async def next_chunk(self) -> list[Msg]:
        """Return the next messages of the range in sequence order; empty when done.

        Raises:
            TransportError: The connection broke, the consumer vanished, or nothing
                arrived for ``idle_timeout`` seconds.
        """
        asked = time.monotonic()  # time Spark spent on the previous chunk does not count
        while not self._done and len(self._buffer) < self._chunk:
            if self._nc.is_closed:
                raise TransportError(f"reading stream {self._stream!r}: the connection closed")
            silent = time.monotonic() - max(asked, self._last_arrival)
            if silent >= self._idle_timeout:
                raise TransportError(
                    f"reading stream {self._stream!r}: no message for "
                    f"{self._idle_timeout:g} s at sequence {self._next_seq}"
                )
            self._ready.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._ready.wait(), min(1.0, self._idle_timeout - silent))
        if self._failure is not None:
            raise self._failure
        chunk, self._buffer = self._buffer, []
        await self._pull()
        return chunk

    async def close(self) -> None:
        """Stop receiving and delete the consumer (it would expire by itself anyway)."""
        self._done = True
        if self._inbox is not None:
            with contextlib.suppress(nats.errors.Error):
                await self._inbox.unsubscribe()
            self._inbox = None
        if self._consumer is not None and not self._nc.is_closed:
            with contextlib.suppress(TimeoutError, nats.errors.Error):
                await self._nc.jetstream(timeout=2.0).delete_consumer(self._stream, self._consumer)
            self._consumer = None
