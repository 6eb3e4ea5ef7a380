"""Every use of what nats-py does not publish, in one place.

nats-py keeps a JetStream context's connection, API prefix and timeout, the server's
INFO, a client's error callback and a subscription's server ID in private attributes, runs a
subscription's callbacks in a private task with a private queue, has no public way
to forget a subscription at once, parses headers in a private method, leaves
``Subscription.drain`` untyped, breaks its read loop when a flush is cancelled,
closes a connection for good when the server closes it for a message over a
``max_payload`` lowered by a config reload, and reads its socket 32 KiB at a time
through a private transport and asyncio stream reader.
goflux needs each of these; reading them only here means a nats-py upgrade that
moves one touches one file. Each reader degrades to ``None`` (or does nothing) where
the attribute is gone, and its caller falls back to the public behaviour.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import types
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

import nats.errors
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import JetStreamContext

from goflux._wire import CACHED_NAME_LENGTH, NAME_CACHE_LIMIT, header_lines

__all__ = (
    "DirectDelivery",
    "ErrorCallback",
    "HeaderLines",
    "LineKeepingClient",
    "Take",
    "api_prefix",
    "api_timeout",
    "callback_task",
    "connection",
    "drain",
    "drain_within",
    "end_direct",
    "error_callback",
    "flush",
    "forget",
    "keep_header_lines",
    "kept_headers",
    "let_go",
    "open_command_block",
    "pending_queue",
    "received_headers",
    "reconnect_after_payload_violation",
    "reconnected",
    "request_inbox",
    "server_error_line",
    "server_info",
    "set_error_callback",
    "subscribe_direct",
    "subscription_id",
    "widen_reads",
    "write_publish",
)

logger = logging.getLogger("goflux.transports")

_HEADER_LINE_START: Final = len(b"NATS/1.0")
_HEADER_LINE_END: Final = _HEADER_LINE_START + 1  # where the first line's "\n" is
_LF_END: Final = _HEADER_LINE_END + 1
PAYLOAD_VIOLATION: Final = "maximum payload violation"  # the server's -ERR, lower-cased
READ_SIZE: Final = 256 * 1024  # bytes a widened connection's reader takes at most a read


def connection(js: JetStreamContext) -> Client:
    """The client a JetStream context sends through."""
    client: Client = js._nc
    return client


def api_prefix(js: JetStreamContext) -> str:
    """The JetStream API subject prefix (``$JS.API``, or a domain's or account's)."""
    prefix: str = js._prefix
    return prefix


def api_timeout(js: JetStreamContext) -> float:
    """Seconds the context waits for a JetStream API reply."""
    timeout: float = js._timeout
    return timeout


async def drain(subscription: Subscription) -> None:
    """Drain ``subscription``: unsubscribe, then deliver what was already received.

    Raises:
        nats.errors.Error: The connection failed while draining.
    """
    await subscription.drain()  # type: ignore[no-untyped-call]


_DRAINS_LEFT: set[asyncio.Future[None]] = set()  # drains outliving their wait (kept alive)


async def drain_within(
    subscription: Subscription, timeout: float, ended: Callable[[], None] | None = None
) -> None:
    """Drain ``subscription``, waiting at most ``timeout`` seconds; the drain goes on.

    nats-py's drain awaits a flush of its own, whose PONG future nats-py resolves
    without checking whether it was cancelled (see :func:`flush`): cancelled at a
    deadline, the late PONG would stop the connection's reader for good. So the drain
    runs shielded: at the deadline (or when the caller is cancelled) only the wait
    ends, and the drain finishes when the PONG comes; ``ended`` is called then (a
    route to forget with :func:`end_direct`, which the caller could not yet).

    Raises:
        TimeoutError: The drain did not finish within ``timeout`` seconds.
        nats.errors.Error: The connection failed while draining.
    """
    draining = asyncio.ensure_future(drain(subscription))
    try:
        await asyncio.wait_for(asyncio.shield(draining), timeout)
    except (TimeoutError, asyncio.CancelledError):
        _DRAINS_LEFT.add(draining)
        draining.add_done_callback(functools.partial(_drain_ended, ended))
        raise


def _drain_ended(ended: Callable[[], None] | None, draining: asyncio.Future[None]) -> None:
    _DRAINS_LEFT.discard(draining)
    if not draining.cancelled():
        draining.exception()  # (retrieved: a failed late drain is nothing to report)
    if ended is not None:
        ended()


async def flush(nc: Client, timeout: float = 10.0) -> None:
    """Flush ``nc`` and wait for the server's PONG, safe to cancel.

    When it returns, the server has read everything sent before it. nats-py's own
    ``flush`` writes its PING straight to the socket, ahead of commands still queued
    for its writer task (a SUB or PUB just made), so the PONG may come before the
    server has seen them; the queue is written out first here. nats-py resolves the
    PONG future without checking whether it was cancelled, so a flush cancelled while
    waiting makes its read loop fail (``InvalidStateError``) and the connection stops
    reading: the round trip runs shielded, a cancelled caller only stops waiting. And
    nats-py forgets a PONG it waits for when the connection drops: if the server
    closes the connection (after an ``-ERR`` such as "maximum payload violation"),
    this fails at once; if the client reconnects, it flushes again on the new
    connection (nats-py has sent the subscriptions again), all within ``timeout``.

    Raises:
        nats.errors.Error: The connection is closed, or no PONG came in ``timeout``.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if nc.is_closed:
            raise nats.errors.ConnectionClosedError
        if not nc.is_connected:  # reconnecting: what is queued goes out after it
            await reconnected(nc, max(deadline - loop.time(), 0.0))
            if nc.is_closed:
                raise nats.errors.ConnectionClosedError
            if not nc.is_connected:
                raise nats.errors.FlushTimeoutError
        if await _round_trip(nc, max(deadline - loop.time(), 0.001)):
            break
        if loop.time() >= deadline:
            raise nats.errors.FlushTimeoutError
    if nc.is_closed:  # a server refusing a command may answer the PING, then close
        raise nats.errors.ConnectionClosedError


async def reconnected(nc: Client, timeout: float) -> bool:
    """Wait (at most ``timeout`` seconds) while ``nc`` reconnects; whether it is connected.

    Returns at once when ``nc`` is connected, or closed.
    """
    if nc.is_connected or nc.is_closed:
        return nc.is_connected
    reconnecting = getattr(nc, "_reconnection_task", None)
    if isinstance(reconnecting, asyncio.Task) and not reconnecting.done():
        # The task ends when the client connected again, or gave up (closed).
        await asyncio.wait({reconnecting}, timeout=timeout)
    return nc.is_connected


async def _round_trip(nc: Client, timeout: float) -> bool:
    """One PING/PONG; False if the connection dropped before the PONG came."""
    await _written(nc, timeout)
    reader = getattr(nc, "_reading_task", None)
    if isinstance(reader, asyncio.Task) and reader.done():
        return False  # the connection dropped: nats-py's flush would return at once
    pong = asyncio.ensure_future(nc.flush(timeout))  # type: ignore[arg-type]  # takes a float
    if not isinstance(reader, asyncio.Task):
        await asyncio.shield(pong)
        return True
    try:
        await asyncio.wait({pong, reader}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not pong.done():
            pong.add_done_callback(_consume)
    if pong.done():
        pong.result()
        return True
    if nc.is_closed:
        raise nats.errors.ConnectionClosedError
    return False


async def _written(nc: Client, timeout: float) -> None:
    """Wait until nats-py's writer task has written what is queued (at most ``timeout``).

    nats-py's ``_flush_pending`` swallows ``CancelledError``; it runs as a task of its
    own, so a cancelled caller stops waiting and is still cancelled.
    """
    flush_pending = getattr(nc, "_flush_pending", None)
    if flush_pending is None or not nc.is_connected:
        return
    writing = asyncio.ensure_future(flush_pending(force_flush=True))
    try:
        await asyncio.wait({writing}, timeout=timeout)
    finally:
        if not writing.done():
            writing.cancel()
            writing.add_done_callback(_consume)


def _consume(task: asyncio.Future[None]) -> None:
    """Retrieve an abandoned flush's outcome (no "exception never retrieved")."""
    if not task.cancelled():
        task.exception()


def callback_task(subscription: Subscription | None) -> asyncio.Task[None] | None:
    """nats-py's task that runs ``subscription``'s callbacks (None if nats-py renamed it).

    It ends when the connection closes for good.
    """
    task = getattr(subscription, "_wait_for_msgs_task", None)
    return task if isinstance(task, asyncio.Task) else None


def let_go(msg: Msg) -> None:
    """Drop ``msg``'s payload and headers: it has been processed.

    nats-py's callback task keeps the last message it called back with in a local
    until the next one arrives; an idle subscription would hold its bytes (up to
    ``max_payload``) indefinitely. What the handler was given keeps its own references.
    """
    msg.data = b""
    msg.headers = None


def pending_queue(subscription: Subscription) -> asyncio.Queue[Msg] | None:
    """The queue of messages received for ``subscription`` and not yet called back."""
    queue = getattr(subscription, "_pending_queue", None)
    return queue if isinstance(queue, asyncio.Queue) else None


async def forget(nc: Client, subscription: Subscription) -> None:
    """Remove ``subscription`` at the server and in the client at once, without draining.

    Used after a drain that ran out of time; does nothing where nats-py's internals
    are not as expected.
    """
    send_unsubscribe = getattr(nc, "_send_unsubscribe", None)
    remove = getattr(nc, "_remove_sub", None)
    sid = getattr(subscription, "_id", None)
    if sid is None or send_unsubscribe is None or remove is None:
        return
    with contextlib.suppress(nats.errors.Error):
        await send_unsubscribe(sid)  # harmless if a drain already sent it
    remove(sid)


class HeaderLines(dict[str, str]):
    """Received headers as nats-py gives them (last value wins), plus every line.

    ``lines`` gives every header line in wire order, names as sent and repeated names
    kept, which nats-py's dict loses. It is parsed from the raw header block when first
    asked for, so a message whose lines nobody reads costs one kept reference. A
    client keeping header lines hands one out only where the dict loses a line
    (``repeated``); other headers come as a plain ``dict``, every line in it.
    """

    __slots__ = ("_raw", "repeated")

    def __init__(self, raw: bytes) -> None:
        super().__init__()
        self._raw = raw
        self.repeated = False  # some name has several lines: the dict holds only the last

    @property
    def lines(self) -> list[tuple[str, str]]:
        """Every ``(name, value)`` header line, in the order received."""
        return header_lines(self._raw)

    @classmethod
    def parsed(cls, block: bytes) -> HeaderLines:
        """The headers of a ``NATS/1.0`` block read from elsewhere (a stored message)."""
        headers = cls(block)
        lines = headers.lines
        headers.update(lines)
        headers.repeated = len(lines) > len(headers)
        return headers


# The key of each header name as sent (its bytes before the colon), as nats-py reads
# it. Names repeat from message to message: a lookup costs a fraction of stripping,
# decoding and checking each. Bounded in count and in name length, so that a peer
# sending ever new (or long) names costs little memory: past the bound, a name is read
# at each use. _DROPPED (a key nats-py never keeps: it holds whitespace) marks a name
# it drops.
_NAMES: dict[bytes, str] = {}
_DROPPED: Final = " "


def _header_key(name: bytes) -> str:
    """The key nats-py reads from header ``name`` (ASCII, stripped), or ``_DROPPED``."""
    try:
        key = name.strip().decode("ascii")
    except UnicodeDecodeError:
        key = _DROPPED
    else:
        if any(c.isspace() for c in key):
            key = _DROPPED  # whitespace inside a name: not a header nats-py keeps
    if len(name) <= CACHED_NAME_LENGTH and len(_NAMES) < NAME_CACHE_LIMIT:
        _NAMES[name] = key
    return key


async def _keep_lines(self: Client, headers: bytes) -> dict[str, str] | None:
    """nats-py's ``_process_headers``, keeping the raw block for :attr:`HeaderLines.lines`.

    Status messages go to nats-py; other header blocks are read by :func:`kept_headers`.
    """
    if not headers:
        return None  # (most messages: no coroutine of nats-py's to await)
    if headers[_HEADER_LINE_START : _HEADER_LINE_START + 1] != b"\r":
        parsed: dict[str, str] | None = await Client._process_headers(self, headers)
        return parsed  # none, or a status message: as nats-py gives it
    return kept_headers(headers)


def kept_headers(headers: bytes) -> dict[str, str] | None:
    """The headers of a block without a status, as a line-keeping client gives them.

    Parsed as nats-py's ``_parse_header_lines`` does (ASCII names without whitespace,
    values stripped and decoded with replacement), in one pass that also counts the
    lines: a plain ``dict`` where it holds every line, else a :class:`HeaderLines`.
    None where the block has no header line.
    """
    # A plain dict while each name comes once (most messages): one of str keys and
    # values is not tracked by the cyclic garbage collector, where a HeaderLines (a
    # dict subclass) is. Hundreds of received messages wait in a subscription's queue:
    # each tracked one counts towards the next collection, which then runs every few
    # hundred messages. The lines are kept only where the dict loses some.
    kept: dict[str, str] = {}
    lines = 0
    names = _NAMES
    for line in headers[_HEADER_LINE_START + 2 :].split(b"\r\n"):
        name, colon, value = line.partition(b":")
        if not colon:
            continue
        lines += 1
        key = names.get(name)
        if key is None:
            key = _header_key(name)
        if key is _DROPPED:
            continue
        kept[key] = value.strip().decode("utf-8", "replace")
    if not lines:
        return None
    if lines == len(kept) and "" not in kept and headers[_HEADER_LINE_END:_LF_END] == b"\n":
        return kept
    # Some name has several lines, or one nats-py drops (perhaps every one: the lines
    # still go to Message.wire_headers); or one is empty, which nats-py keeps and the
    # lines leave out; or the first line does not end as it should, which nats-py reads
    # past and the lines skip.
    every = HeaderLines(headers)
    every.update(kept)
    every.repeated = True
    return every


def received_headers(headers: bytes | Mapping[str, str] | None) -> Mapping[str, str] | None:
    """The headers a direct delivery's ``headers`` stand for, as a mapping.

    A :class:`DirectDelivery` may get a header block as received (see
    :func:`_direct_routes`): read here as the client would have read it.
    """
    if isinstance(headers, bytes):
        return kept_headers(headers)
    return headers


def _reads_blocks_later(nc: Client, headers: bytes) -> bool:
    """Whether a direct delivery may get ``headers`` unread: ``nc`` keeps header lines.

    Only a block without a status: :func:`kept_headers` and goflux's readers of a block
    (:func:`goflux._wire.read_headers`, :attr:`goflux.Message.wire_headers`) read it as
    the client would have, a status nats-py reads.
    """
    return (
        headers[_HEADER_LINE_START : _HEADER_LINE_START + 1] == b"\r"
        and getattr(nc._process_headers, "__func__", None) is _keep_lines
    )


class LineKeepingClient(Client):
    """A nats-py client whose received headers are :class:`HeaderLines`."""

    _process_headers = _keep_lines


def keep_header_lines(nc: Client) -> None:
    """Make ``nc`` hand out received headers as :class:`HeaderLines` from now on.

    (Headers that lose no line in nats-py's dict come as a plain ``dict``: see
    :class:`HeaderLines`.)

    Done on the user's client instance (once; a no-op where nats-py has no such hook):
    the headers stay a ``dict`` with nats-py's values, so other users of the
    connection see no difference.
    """
    if isinstance(nc, LineKeepingClient) or "_process_headers" in vars(nc):
        return
    if not callable(getattr(nc, "_process_headers", None)):
        return
    nc._process_headers = types.MethodType(_keep_lines, nc)  # type: ignore[method-assign]


ErrorCallback = Callable[[Exception], Awaitable[None]]


def error_callback(nc: Client) -> ErrorCallback | None:
    """The callback ``nc`` reports asynchronous errors to (the user's, or nats-py's default)."""
    callback = getattr(nc, "_error_cb", None)
    return callback if callable(callback) else None


def set_error_callback(nc: Client, callback: ErrorCallback) -> bool:
    """Make ``nc`` report asynchronous errors to ``callback``; False where nats-py cannot."""
    if not hasattr(nc, "_error_cb"):
        return False
    nc._error_cb = callback
    return True


def request_inbox(nc: Client) -> str | None:
    """The wildcard subject nats-py receives every request's reply on (once it has one)."""
    prefix = getattr(nc, "_resp_sub_prefix", None)
    if not isinstance(prefix, bytearray | bytes) or not prefix:
        return None
    return bytes(prefix).decode() + "*"


def server_error_line(nc: Client) -> str | None:
    """The ``-ERR`` line nats-py is reporting right now, in the server's own case.

    nats-py lower-cases the text it passes to the error callback (subjects included);
    while it runs that callback, the line is still at the head of its parser's buffer.
    Returns the text between the quotes, or None where that is not so.
    """
    parser = getattr(nc, "_ps", None)
    buf = getattr(parser, "buf", None)
    if not isinstance(buf, bytearray | bytes) or not buf.startswith(b"-ERR"):
        return None
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    text = bytes(buf[4:end]).decode(errors="replace").strip()
    return text[1:-1] if len(text) >= 2 and text[0] == text[-1] == "'" else text


def server_info(nc: Client) -> dict[str, Any]:
    """The INFO the server sent on ``nc``'s latest (re)connect ({} before the first).

    nats-py replaces the dict on every connect and reconnect, so its identity tells
    whether the server behind the connection may have changed; it keeps that INFO in
    a private attribute.
    """
    info = getattr(nc, "_server_info", None)
    return info if isinstance(info, dict) else {}


def subscription_id(subscription: Subscription) -> int | None:
    """The ``sid`` the server knows ``subscription`` by (None if nats-py renamed it)."""
    sid = getattr(subscription, "_id", None)
    return sid if isinstance(sid, int) else None


def reconnect_after_payload_violation(nc: Client) -> None:
    """Make ``nc`` reconnect when the server closes it for a message over its ``max_payload``.

    A config reload may lower ``max_payload``; the server tells no client (each still
    holds the limit its INFO gave on connect) and closes the connection of one that
    sends a larger message, right after an ``-ERR 'Maximum Payload Violation'``.
    nats-py treats every ``-ERR`` it does not know as fatal: it closes the client for
    good, although the server would take it back at once. Here, on ``nc`` alone (once;
    a no-op where nats-py has no such hook), that ``-ERR`` is first reported to the
    error callback (which nats-py skips for it), then handled as nats-py handles a
    stale connection: the client reconnects when ``allow_reconnect`` is on (the
    default), learns the new limit from the server's INFO, sends its subscriptions
    again and what it buffered meanwhile; without ``allow_reconnect`` it closes, as
    before. Any other ``-ERR`` goes to nats-py as before.
    """
    original = getattr(nc, "_process_err", None)
    op_error = getattr(nc, "_process_op_err", None)
    if not callable(original) or not callable(op_error):
        return
    if getattr(original, "_goflux_payload_violation", False):
        return  # done already

    async def process_err(err_msg: str) -> None:
        if PAYLOAD_VIOLATION not in err_msg:  # nats-py passes the text lower-cased
            await original(err_msg)
            return
        error = nats.errors.Error(f"nats: {err_msg.strip(chr(39))}")  # as nats-py words it
        callback = error_callback(nc)
        if callback is not None:
            await callback(error)  # while the parser still holds the -ERR line
        if nc.options.get("allow_reconnect") and not nc.is_connecting:
            await op_error(error)
        else:
            await original(err_msg)

    process_err._goflux_payload_violation = True  # type: ignore[attr-defined]
    nc._process_err = process_err  # type: ignore[method-assign]


def widen_reads(nc: Client) -> None:
    """Make ``nc``'s reader take up to :data:`READ_SIZE` bytes a read, not 32 KiB.

    nats-py's read loop asks its transport for 32 KiB at a time, from an asyncio
    stream reader that stops reading the socket once 64 KiB wait in it: a 64 KB
    message takes two reads and two passes of the parser, and the socket is taken off
    the event loop's selector and put back about once a message. Widened, a read takes
    what has come up to 256 KiB (what asyncio's socket transport receives at a time),
    and the reader buffers up to twice that before it pauses. On two subscribers of
    64 KB messages sharing a connection this gave 1.2-1.4 times the messages a second
    at 0.6-0.8 of the client CPU a message; with 100 B and 1 KB messages it changed
    nothing measurable.

    Done on ``nc`` (once; a no-op where nats-py's or asyncio's internals are not as
    expected): the current transport at once, and again as each reconnect's read loop
    starts (nats-py connects the transport again, with a new stream reader). Other
    users of the connection get the same messages, parsed from larger chunks; at most
    about 768 KiB wait unparsed, against 320 KiB before.
    """
    if getattr(nc, "_goflux_wide_reads", False):
        return
    read_loop = getattr(nc, "_read_loop", None)
    if not callable(read_loop):
        return

    async def wide_read_loop() -> None:
        _widen_safely(getattr(nc, "_transport", None))  # connected again: a new reader
        await read_loop()

    _widen_safely(getattr(nc, "_transport", None))
    nc._read_loop = wide_read_loop  # type: ignore[method-assign]
    nc._goflux_wide_reads = True  # type: ignore[attr-defined]


def _widen_safely(transport: object) -> None:
    """:func:`_widen`, or nothing where it fails: the read loop must start either way."""
    try:
        _widen(transport)
    except Exception:
        logger.debug("left the connection's reads at nats-py's size", exc_info=True)


def _widen(transport: object) -> None:
    """Make ``transport`` (nats-py's TCP one; TLS too) read up to :data:`READ_SIZE`.

    nats-py connects the same transport again on a reconnect, with a new stream
    reader: its limit is raised each time, the transport's ``read`` replaced once.
    """
    reader = getattr(transport, "_io_reader", None)
    read = getattr(type(transport), "read", None)
    if (
        transport is None
        or not isinstance(reader, asyncio.StreamReader)
        or not isinstance(getattr(reader, "_limit", None), int)
        or not callable(read)
    ):
        return
    reader._limit = max(reader._limit, READ_SIZE)  # type: ignore[attr-defined]
    if "read" in vars(transport):
        return  # widened before this reconnect

    async def wide_read(buffer_size: int) -> bytes:
        data: bytes = await read(transport, max(buffer_size, READ_SIZE))
        return data

    transport.read = wide_read  # type: ignore[attr-defined]


Take = Callable[[str, str, bytes, "bytes | dict[str, str] | None", "DirectDelivery"], None]
"""What takes a direct subscription's message: ``take(subject, reply, data, headers, delivery)``.

``headers`` is None (none), the client's mapping, or where the client keeps header
lines, a block without a status as received, to be read when needed
(:func:`received_headers`, :func:`goflux._wire.read_headers`).
"""


class DirectDelivery:
    """Stands in for a nats-py subscription's pending queue: each message is taken at once.

    nats-py puts every message it reads into the subscription's ``asyncio.Queue``,
    and a task of the subscription's takes it out and awaits the callback: a queue
    put, a queue get and a coroutine per message. Installed in that queue's place
    (:func:`subscribe_direct`), this hands each message's subject, reply, data and
    headers to ``take`` right where nats-py's reader parsed it, in order, with nothing
    kept and no nats-py ``Msg`` built (:func:`_direct_routes`). ``take`` must not raise
    (it runs in the connection's read loop) and must not block; work it cannot do at
    once it hands to :meth:`later`, whose tasks a drain of the subscription waits for.
    """

    __slots__ = ("_later", "_sub", "_take")

    def __init__(self, take: Take) -> None:
        self._take = take
        self._sub: Subscription | None = None
        self._later: set[asyncio.Task[None]] = set()

    def later(self, work: Awaitable[None]) -> None:
        """Run ``work`` as a task that a drain of the subscription waits for."""
        task = asyncio.ensure_future(work)
        self._later.add(task)
        task.add_done_callback(self._later.discard)

    # What nats-py calls on its pending queue (the reader, drain, next_msg, stats).

    def put_nowait(self, msg: Msg) -> None:
        """Take ``msg`` (nats-py's reader calls this for each message)."""
        sub = self._sub
        if sub is not None:
            sub._pending_size = 0  # nothing is kept: no slow-consumer drop can trigger
        try:
            self._take(msg.subject, msg.reply, msg.data, msg.headers, self)
        except Exception:  # nats-py's reader must go on (its other subscriptions too)
            logger.exception("could not take a message on %r", msg.subject)

    def qsize(self) -> int:
        """Nothing waits here."""
        return 0

    def empty(self) -> bool:
        """Nothing waits here."""
        return True

    def task_done(self) -> None:
        """Nothing to count."""

    async def join(self) -> None:
        """Wait until the work handed to :meth:`later` is done (a drain waits here)."""
        while self._later:
            await asyncio.wait(set(self._later))

    async def get(self) -> Msg:
        """Never returns: messages are taken as they come, not queued."""
        await asyncio.get_running_loop().create_future()
        raise AssertionError("unreachable")  # pragma: no cover


async def subscribe_direct(nc: Client, subject: str, take: DirectDelivery) -> Subscription:
    """Subscribe ``subject`` on ``nc`` with ``take`` receiving each message at once.

    Where nats-py's internals are not as expected, the subscription runs a callback
    instead (nats-py's own queue and task) that calls ``take`` the same way.

    Raises:
        nats.errors.Error: The connection is closed or draining, or the subject is bad.
    """
    widen_reads(nc)
    sub = await nc.subscribe(subject, pending_bytes_limit=0)
    queue = getattr(sub, "_pending_queue", None)
    if isinstance(queue, asyncio.Queue) and isinstance(getattr(sub, "_pending_size", None), int):
        take._sub = sub
        sub._pending_queue = take  # type: ignore[assignment]
        while not queue.empty():  # (nothing can have come yet: no request was sent)
            take.put_nowait(queue.get_nowait())
        routes = _direct_routes(nc)
        sid = subscription_id(sub)
        if routes is not None and sid is not None and isinstance(sub._received, int):
            live = nc._subs
            for gone in [other for other in routes if other not in live]:
                del routes[gone]  # (ended without :func:`end_direct`: a failed drain)
            routes[sid] = take
        return sub
    with contextlib.suppress(nats.errors.Error):  # pragma: no cover - another nats-py
        await sub.unsubscribe()

    async def callback(msg: Msg) -> None:  # pragma: no cover - another nats-py
        take._take(msg.subject, msg.reply, msg.data, msg.headers, take)

    return await nc.subscribe(subject, cb=callback)  # pragma: no cover - another nats-py


def end_direct(nc: Client, subscription: Subscription) -> None:
    """Forget a :func:`subscribe_direct` subscription once it is unsubscribed or drained.

    Its route would otherwise keep it (and what its ``take`` holds) alive as long
    as the client.
    """
    routes = getattr(nc, "_goflux_direct_routes", None)
    sid = subscription_id(subscription)
    if isinstance(routes, dict) and sid is not None and sid not in nc._subs:
        routes.pop(sid, None)


def _direct_routes(nc: Client) -> dict[int, DirectDelivery] | None:
    """The subscriptions of ``nc`` whose messages skip nats-py's ``_process_msg``.

    nats-py's reader hands every message to ``_process_msg``, which counts it, looks
    its subscription up, parses its headers, builds the ``Msg``, then checks for slow
    consumers, request futures and JetStream flow control before queueing it. For a
    :class:`DirectDelivery` subscription only the first three apply: installed once on
    ``nc`` (an instance attribute, as nats-py's reader looks the method up on every
    message), this does those and hands the message's parts over, without a ``Msg``
    (half a microsecond a message: the taker keeps what it needs in an object of its
    own), and where ``nc`` keeps header lines, a header block without a status unread
    (about 2 µs a message of three headers: what a handler does not ask for is never
    read); every other subscription's messages go to nats-py's method as before. None
    where nats-py's internals are not as expected (the subscription's queue still takes
    each message at once).
    """
    routes = getattr(nc, "_goflux_direct_routes", None)
    if isinstance(routes, dict):
        return routes
    original = getattr(nc, "_process_msg", None)
    process_headers = getattr(nc, "_process_headers", None)
    subs = getattr(nc, "_subs", None)
    if not (callable(original) and callable(process_headers) and isinstance(subs, dict)):
        return None
    if not isinstance(getattr(nc, "stats", None), dict):
        return None
    direct: dict[int, DirectDelivery] = {}
    stats = nc.stats

    async def process_msg(
        sid: int, subject: bytes, reply: bytes, data: bytes, headers: bytes
    ) -> None:
        delivery = direct.get(sid)
        if delivery is None:
            await original(sid, subject, reply, data, headers)
            return
        stats["in_msgs"] += 1
        stats["in_bytes"] += len(data)
        sub = subs.get(sid)
        if sub is None:  # unsubscribed or drained: nats-py would drop it too
            del direct[sid]
            return
        sub._received += 1
        parsed: bytes | dict[str, str] | None
        if not headers:
            parsed = None
        elif _reads_blocks_later(nc, headers):
            parsed = headers  # read when needed: most handlers need little of it
        else:  # (nc's own method, looked up now: keep_header_lines may replace it)
            parsed = await nc._process_headers(headers)
        try:  # (what put_nowait does: nothing counts towards a slow consumer here)
            delivery._take(subject.decode(), reply.decode(), data, parsed, delivery)
        except Exception:  # nats-py's reader must go on (its other subscriptions too)
            logger.exception("could not take a message on %r", subject.decode(errors="replace"))

    nc._process_msg = process_msg  # type: ignore[method-assign]
    nc._goflux_direct_routes = direct  # type: ignore[attr-defined]
    return direct


def write_publish(nc: Client, subject: str, payload: bytes) -> bool:
    """Queue a PUB of ``payload`` to ``subject`` on ``nc`` without awaiting; whether it was.

    For the subjects a server made (a JetStream delivery's ``$JS.ACK`` reply): no
    subject check, no coroutine, the PUB line formatted in one step (nats-py's own
    helper costs four times as much), the writer task woken only when it is idle, as
    ``nc.publish`` would. Only while the connection is up, its buffer has room and
    the payload is within the server's ``max_payload``; otherwise (reconnecting,
    closed, draining, a full buffer, a payload too large, another nats-py) it returns
    False and the caller publishes with ``nc.publish``, which handles each case.
    """
    try:
        if not _writable(nc) or len(payload) > nc._max_payload:
            return False  # (nats-py raises MaxPayloadError for a payload too large)
        command = b"PUB %s %d\r\n%s\r\n" % (subject.encode(), len(payload), payload)
        limit = nc._max_pending_size
        size = nc._pending_data_size + len(command)
        if limit > 0 and size > limit:
            return False
        nc._pending.append(command)
        nc._pending_data_size = size
        stats = nc.stats
        stats["out_msgs"] += 1
        stats["out_bytes"] += len(payload)
        _wake_writer(nc)
    except AttributeError:  # pragma: no cover - another nats-py
        return False
    return True


def open_command_block(nc: Client) -> bytearray | None:
    """Append an empty block to ``nc``'s pending buffer, for commands added in place.

    The caller adds whole commands (PUB lines of subjects a server made, payloads
    within ``max_payload``) to the block and adds their length to
    ``nc._pending_data_size`` itself; nats-py's writer task, woken here, sends the
    block with the rest of the buffer once the current event-loop step ends. A block
    is good only while it is in ``nc._pending`` (the writer replaces that list after
    each write) and the connection's status is what it was. None where nothing can
    be queued now: not connected, a full buffer, or another nats-py.
    """
    try:
        if not _writable(nc):
            return None
        limit = nc._max_pending_size
        if limit > 0 and nc._pending_data_size >= limit:
            return None
        block = bytearray()
        nc._pending.append(block)  # type: ignore[arg-type] # (nats-py joins bytes-likes)
        _wake_writer(nc)
    except AttributeError:  # pragma: no cover - another nats-py
        return None
    return block


def _writable(nc: Client) -> bool:
    """Whether ``nc`` is connected with its writer task running (AttributeError if unknown)."""
    flusher = nc._flusher_task
    return (
        nc._status == Client.CONNECTED
        and flusher is not None
        and not flusher.done()
        and nc._flush_queue is not None
    )


def _wake_writer(nc: Client) -> None:
    """Wake nats-py's writer task, as ``nc.publish`` does, unless it is awake already."""
    queue = nc._flush_queue
    if queue is not None and queue.empty():
        queue.put_nowait(asyncio.get_running_loop().create_future())
