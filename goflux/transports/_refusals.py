"""The server's refusals on a connection, seen by goflux as they arrive.

A NATS server refuses a publish or a subscription it does not permit with an
asynchronous ``-ERR`` line, not with a reply: nats-py hands it to the connection's
error callback and goes on, so a caller waiting for a reply waits for its whole
timeout, and a fire-and-forget publish or a subscription is lost in silence. goflux
wraps that callback once per connection (the user's own callback still runs after it)
and routes each refusal to whoever is waiting on its subject: a request or JetStream
publish fails at once (:class:`Guard`), a subscription fails (:meth:`Refusals.listen`),
and a refused core publish nobody waits for is kept until the next publish to that
subject (:meth:`Refusals.take`). A refused reconnect (the server no longer accepts
the credentials) reaches every connection listener. A message over a ``max_payload``
the server lowered since the client connected makes the server close the connection:
goflux makes the client reconnect instead of closing for good, and tells every
:class:`Overflow` listener (:meth:`Refusals.on_overflow`, a :class:`Guard` built with
``overflow=True``); core publishers read :attr:`Refusals.overflows`.

Subjects are matched exactly, in the server's own case, read from the ``-ERR`` line
itself (nats-py lower-cases the text it passes on). Where that line is not at hand,
a refusal is "folded" (lower-cased) and matches only where no other subject differs
from it by case alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import weakref
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Final, Literal, TypeVar

import nats.errors
from nats.aio.client import Client

from goflux._errors import PermissionDenied
from goflux.transports._natspy import (
    PAYLOAD_VIOLATION,
    error_callback,
    reconnect_after_payload_violation,
    request_inbox,
    server_error_line,
    set_error_callback,
)

__all__ = (
    "Accept",
    "Guard",
    "Overflow",
    "Overflowed",
    "Refusal",
    "Refusals",
    "closed_reason",
    "parse",
    "refusals",
)

Operation = Literal["publish", "subscribe", "connect"]
Listener = Callable[["Refusal"], None]
OverflowListener = Callable[["Overflow"], None]
Accept = Callable[["Refusal"], bool]
Item = TypeVar("Item")

_VIOLATION: Final = re.compile(
    r'permissions violation for (publish|subscription) to "([^"]*)"'
    r'(?: using queue "([^"]*)")?(?: \(sid "(\d+)"\))?',
    re.IGNORECASE,
)
# How the server refuses the credentials (on connect or reconnect), lower-cased.
_CREDENTIALS: Final = (
    "authorization violation",
    "user authentication expired",
    "user authentication revoked",
    "account authentication expired",
)
_PERMISSIONS: Final = "permissions violation"
_UNCLAIMED_LIMIT: Final = 1024  # refused core publishes remembered per connection


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refusal by the server.

    Attributes:
        operation: ``"publish"``, ``"subscribe"`` or ``"connect"``.
        subject: The subject refused (``""`` for ``"connect"``); lower-cased when
            ``folded``.
        queue: The queue group of a refused subscription, if any.
        sid: The server's ID of a subscription it removed (after a config reload).
        reason: The server's words.
        folded: The subject is lower-cased: its case was lost on the way.
    """

    operation: Operation
    subject: str
    queue: str | None
    sid: int | None
    reason: str
    folded: bool = False

    def error(self, what: str, *, may_be_stored: bool = False) -> PermissionDenied:
        """The :class:`~goflux.PermissionDenied` for ``what`` (e.g. "publish to 'x'")."""
        return PermissionDenied(
            f"{what}: the server refused it ({self.reason})",
            operation=self.operation,
            subject=self.subject,
            reason=self.reason,
            may_be_stored=may_be_stored,
        )

    def names(self, subject: str) -> bool:
        """Whether this refusal is of ``subject``."""
        return self.subject == (subject.lower() if self.folded else subject)

    def about(self, subject: str) -> bool:
        """Whether this refusal is of ``subject`` or of a subject under it."""
        mine = subject.lower() if self.folded else subject
        return self.subject == mine or self.subject.startswith(mine + ".")


@dataclass(frozen=True, slots=True)
class Overflow:
    """The server closed the connection for a message over its ``max_payload``.

    It had lowered the limit (a config reload) below what it announced when the client
    connected, and told no client. The message it closed the connection for was lost,
    and so was whatever the client sent after it before the connection dropped.

    Attributes:
        announced: The ``max_payload`` the server had announced, in bytes.
        reason: The server's words.
    """

    announced: int
    reason: str


class Overflowed(Exception):  # a signal between goflux's own modules
    """Raised by a :class:`Guard` built with ``overflow=True`` when an :class:`Overflow` came.

    Never reaches users: the publisher that asked for it turns it into a
    :class:`~goflux.PublishError` once it knows the server's new limit.

    Attributes:
        overflow: What the server did.
    """

    def __init__(self, overflow: Overflow) -> None:
        super().__init__(f"the server closed the connection: {overflow.reason}")
        self.overflow = overflow


def parse(error: Exception, line: str | None = None) -> Refusal | None:
    """The refusal nats-py reports with ``error``, if it is one.

    ``line`` is the server's ``-ERR`` text in its own case, when at hand. Only
    nats-py's own errors count: an exception raised by a message callback (which
    nats-py passes to the same error callback) is never read as a refusal.
    """
    if not isinstance(error, nats.errors.Error):
        return None
    text = str(error)
    if not text.startswith("nats: "):
        return None
    folded = line is None
    said = text.removeprefix("nats: ").strip().strip("'") if line is None else line
    match = _VIOLATION.match(said)
    if match is not None:
        operation: Operation = "publish" if match.group(1).lower() == "publish" else "subscribe"
        sid = match.group(4)
        return Refusal(
            operation,
            match.group(2),
            match.group(3),
            int(sid) if sid else None,
            said,
            folded,
        )
    if said.lower().startswith(_CREDENTIALS):
        return Refusal("connect", "", None, None, said, folded)
    return None


class _Prefix:
    """A listener for refusals of subjects under a prefix (that ``accept`` takes)."""

    __slots__ = ("accept", "listener", "operation", "prefix")

    def __init__(
        self, operation: Operation, prefix: str, listener: Listener, accept: Accept | None
    ) -> None:
        self.operation = operation
        self.prefix = prefix
        self.listener = listener
        self.accept = accept

    def takes(self, refusal: Refusal) -> bool:
        if refusal.operation != self.operation:
            return False
        prefix = self.prefix.lower() if refusal.folded else self.prefix
        if not refusal.subject.startswith(prefix):
            return False
        return self.accept is None or self.accept(refusal)


class Refusals:
    """The refusals of one connection, routed to whoever waits on their subject.

    Attributes:
        last: The most recent refusal.
        count: Refusals seen so far.
        overflow: The most recent :class:`Overflow`.
        overflows: Overflows seen so far.
    """

    __slots__ = (
        "__weakref__",
        "_by_subject",
        "_connection",
        "_observers",
        "_overflow_listeners",
        "_prefixes",
        "_refused_inbox",
        "_reply_inbox",
        "_requests",
        "_unclaimed",
        "count",
        "last",
        "overflow",
        "overflows",
    )

    def __init__(self, reply_inbox: Callable[[], str | None] = lambda: None) -> None:
        self._reply_inbox = reply_inbox  # where replies to requests come, once known
        self._refused_inbox: Refusal | None = None
        self._requests: set[Guard] = set()
        self._by_subject: dict[tuple[str, str], list[Listener]] = {}
        self._prefixes: list[_Prefix] = []
        self._connection: list[Listener] = []
        self._observers: list[Listener] = []
        self._unclaimed: OrderedDict[str, Refusal] = OrderedDict()
        self._overflow_listeners: list[OverflowListener] = []
        self.last: Refusal | None = None
        self.count = 0
        self.overflow: Overflow | None = None
        self.overflows = 0

    def listen(self, operation: Operation, subject: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with each refusal of ``operation`` on ``subject``.

        ``"connect"`` listens for refused credentials (``subject`` is ignored).
        Returns the function that stops listening.
        """
        if operation == "connect":
            self._connection.append(listener)
            return lambda: _discard(self._connection, listener)
        key = (operation, subject)
        listeners = self._by_subject.setdefault(key, [])
        listeners.append(listener)

        def remove() -> None:
            _discard(listeners, listener)
            if not listeners and self._by_subject.get(key) is listeners:
                del self._by_subject[key]

        return remove

    def listen_prefix(
        self,
        operation: Operation,
        prefix: str,
        listener: Listener,
        *,
        accept: Accept | None = None,
    ) -> Callable[[], None]:
        """Call ``listener`` with each refusal of ``operation`` under ``prefix``.

        With ``accept``, only the refusals it accepts count (the others are left for
        whoever else waits). Returns the function that stops listening.
        """
        entry = _Prefix(operation, prefix, listener, accept)
        self._prefixes.append(entry)
        return lambda: _discard(self._prefixes, entry)

    def observe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every refusal, without claiming it.

        Returns the function that stops observing.
        """
        self._observers.append(listener)
        return lambda: _discard(self._observers, listener)

    def on_overflow(self, listener: OverflowListener) -> Callable[[], None]:
        """Call ``listener`` with each :class:`Overflow` on the connection.

        Returns the function that stops listening.
        """
        self._overflow_listeners.append(listener)
        return lambda: _discard(self._overflow_listeners, listener)

    def overflowed(self, overflow: Overflow) -> None:
        """Record ``overflow`` and tell every listener."""
        self.overflow = overflow
        self.overflows += 1
        for listener in list(self._overflow_listeners):
            listener(overflow)

    def take(self, subject: str) -> Refusal | None:
        """Remove and return a refused publish to ``subject`` that nobody waited for."""
        if not self._unclaimed:
            return None
        refusal = self._unclaimed.pop(subject, None)
        if refusal is None:
            folded = self._unclaimed.get(subject.lower())
            if folded is not None and folded.folded:
                refusal = self._unclaimed.pop(subject.lower())
        return refusal

    def dispatch(self, refusal: Refusal) -> None:
        """Route ``refusal`` to its listeners (a refused publish nobody waits for is kept)."""
        self.last = refusal
        self.count += 1
        for observer in list(self._observers):
            observer(refusal)
        if refusal.operation == "connect":
            for listener in list(self._connection):
                listener(refusal)
            return
        if refusal.operation == "subscribe":
            inbox = self._reply_inbox()
            if inbox is not None and refusal.names(inbox):  # no reply can come, ever
                self._refused_inbox = refusal
                for guard in list(self._requests):
                    guard.inbox_refused(refusal)
                return
        claimed = False
        for listener in self._listeners_of(refusal):
            listener(refusal)
            claimed = True
        for entry in list(self._prefixes):
            if entry.takes(refusal):
                entry.listener(refusal)
                claimed = True
        if not claimed and refusal.operation == "publish":
            self._unclaimed[refusal.subject] = refusal
            self._unclaimed.move_to_end(refusal.subject)
            if len(self._unclaimed) > _UNCLAIMED_LIMIT:
                self._unclaimed.popitem(last=False)

    def _listeners_of(self, refusal: Refusal) -> list[Listener]:
        if not refusal.folded:
            return list(self._by_subject.get((refusal.operation, refusal.subject), ()))
        # Case lost: a match only if one subject alone fits the lower-cased name.
        keys = [
            key
            for key in self._by_subject
            if key[0] == refusal.operation and key[1].lower() == refusal.subject
        ]
        return list(self._by_subject[keys[0]]) if len(keys) == 1 else []

    def refused_reply_inbox(self) -> Refusal | None:
        """The refusal of the inbox replies to requests come to, if it was refused.

        nats-py subscribes that inbox once per connection; refused, no request on the
        connection can get a reply.
        """
        refusal = self._refused_inbox
        if refusal is None:
            return None
        inbox = self._reply_inbox()
        return refusal if inbox is not None and refusal.names(inbox) else None

    def guard(
        self,
        operation: Operation,
        subject: str,
        what: str,
        *,
        accept: Accept | None = None,
        request: bool = False,
        overflow: bool = False,
    ) -> Guard:
        """A ``with`` block that fails with PermissionDenied once ``subject`` is refused.

        With ``accept``, ``subject`` is a prefix, and the refusals under it that
        ``accept`` takes count. ``request=True`` marks a request: it fails too when
        the server refuses the inbox its reply would come to (then the request itself
        went out: a publish ``may_be_stored``). ``overflow=True``: it fails with
        :class:`Overflowed` too when the server closes the connection for a message
        over its ``max_payload`` (whatever was in flight is lost, or its reply is).
        """
        return Guard(
            self, operation, subject, what, accept=accept, request=request, overflow=overflow
        )


def _discard(items: list[Item], item: Item) -> None:
    with contextlib.suppress(ValueError):
        items.remove(item)


class Guard:
    """Fails the block it guards with :class:`~goflux.PermissionDenied` on a refusal.

    Like :func:`asyncio.timeout`, it cancels the task running the block when the
    server refuses the guarded subject, and turns that cancellation into the error
    on the way out; a cancellation from elsewhere passes through untouched. Built
    with ``overflow=True``, it fails the same way with :class:`Overflowed` when the
    server closes the connection for a message over its ``max_payload``.
    """

    __slots__ = (
        "_accept",
        "_may_be_stored",
        "_operation",
        "_overflow",
        "_overflowed",
        "_refusal",
        "_refusals",
        "_remove",
        "_request",
        "_subject",
        "_task",
        "_what",
    )

    def __init__(
        self,
        refusals: Refusals,
        operation: Operation,
        subject: str,
        what: str,
        *,
        accept: Accept | None,
        request: bool,
        overflow: bool = False,
    ) -> None:
        self._refusals = refusals
        self._overflow = overflow
        self._overflowed: Overflow | None = None
        self._request = request
        self._operation = operation
        self._subject = subject
        self._what = what
        self._accept = accept
        self._may_be_stored = False
        self._task: asyncio.Task[object] | None = None
        self._refusal: Refusal | None = None
        self._remove: Callable[[], None] | None = None

    def __enter__(self) -> Guard:
        self._task = asyncio.current_task()
        registry = self._refusals
        if self._accept is None:
            remove = registry.listen(self._operation, self._subject, self._refused)
        else:
            remove = registry.listen_prefix(
                self._operation, self._subject, self._refused, accept=self._accept
            )
        if self._overflow:
            stop = registry.on_overflow(self._dropped)

            def remove_both() -> None:
                remove()
                stop()

            self._remove = remove_both
        else:
            self._remove = remove
        if self._request:
            refused = registry.refused_reply_inbox()
            if refused is not None:  # nothing sent yet: say so at once
                self._remove()
                raise refused.error(f"{self._what}: the inbox for its reply (not sent)")
            registry._requests.add(self)
        return self

    def inbox_refused(self, refusal: Refusal) -> None:
        """The server refused the inbox the reply would come to: the request went out."""
        if self._refusal is None:
            self._may_be_stored = True
            self._what = f"{self._what}: the inbox for its reply"
        self._refused(refusal)

    def _refused(self, refusal: Refusal) -> None:
        if self._refusal is None and self._overflowed is None and self._task is not None:
            self._refusal = refusal
            self._task.cancel()

    def _dropped(self, overflow: Overflow) -> None:
        if self._refusal is None and self._overflowed is None and self._task is not None:
            self._overflowed = overflow
            self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._remove is not None:
            self._remove()
        if self._request:
            self._refusals._requests.discard(self)
        refusal, overflow = self._refusal, self._overflowed
        if (refusal is None and overflow is None) or self._task is None:
            return
        if self._task.uncancel() > 0:
            return  # cancelled from elsewhere too: that cancellation wins
        if overflow is not None:
            raise Overflowed(overflow) from exc
        assert refusal is not None
        raise refusal.error(self._what, may_be_stored=self._may_be_stored) from exc


_REGISTRIES: weakref.WeakKeyDictionary[Client, Refusals] = weakref.WeakKeyDictionary()


def refusals(nc: Client) -> Refusals:
    """The refusals of ``nc``; the first call starts watching its error callback.

    The callback ``nc`` had (the user's ``error_cb``, or nats-py's default, which logs)
    keeps being called with every error, after goflux has routed it.
    """
    registry = _REGISTRIES.get(nc)
    if registry is not None:
        return registry
    client = weakref.ref(nc)  # the registry must not keep its key alive

    def reply_inbox() -> str | None:
        connected = client()
        return request_inbox(connected) if connected is not None else None

    registry = Refusals(reply_inbox)
    _REGISTRIES[nc] = registry
    original = error_callback(nc)

    async def on_error(error: Exception) -> None:
        # Read before anything suspends: nats-py's parser still holds the -ERR line.
        line = server_error_line(nc)
        refusal = parse(error, line)
        if refusal is not None:
            registry.dispatch(refusal)
        elif _is_payload_violation(error):
            registry.overflowed(Overflow(nc.max_payload, line or "Maximum Payload Violation"))
        if original is not None:
            await original(error)

    set_error_callback(nc, on_error)
    reconnect_after_payload_violation(nc)
    return registry


def _is_payload_violation(error: Exception) -> bool:
    """Whether nats-py reports the server's ``-ERR 'Maximum Payload Violation'``."""
    return type(error) is nats.errors.Error and PAYLOAD_VIOLATION in str(error).lower()


def closed_reason(nc: Client) -> str:
    """Why the server closed ``nc``, in its words (``""`` if it gave none).

    For example ``" (the server said: maximum subscriptions exceeded)"``, ready to
    append to an error message. A refusal of one publish or subscription (which
    leaves the connection open) and the client's own errors are not reasons.
    """
    error = nc.last_error
    if isinstance(error, nats.errors.AuthorizationError):
        return " (the server said: authorization violation)"
    if type(error) is not nats.errors.Error:
        return ""
    text = str(error).removeprefix("nats: ").strip()
    if len(text) >= 2 and text[0] == text[-1] == "'":
        text = text[1:-1]
    if not text or text.lower().startswith(_PERMISSIONS):
        return ""
    return f" (the server said: {text})"
