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
the credentials) reaches every connection listener.

nats-py lower-cases the server's error text, subjects included, so subjects are
matched lower-cased.
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

from nats.aio.client import Client

from goflux._errors import PermissionDenied
from goflux.transports._natspy import error_callback, set_error_callback

__all__ = ("Guard", "Refusal", "Refusals", "closed_reason", "parse", "refusals")

Operation = Literal["publish", "subscribe", "connect"]
Listener = Callable[["Refusal"], None]
Item = TypeVar("Item")

_VIOLATION: Final = re.compile(
    r'permissions violation for (publish|subscription) to "([^"]*)"'
    r'(?: using queue "([^"]*)")?(?: \(sid "(\d+)"\))?'
)
# What the server says when it refuses the credentials (on connect or reconnect).
_CREDENTIALS: Final = (
    "authorization violation",
    "authentication expired",
    "authentication revoked",
    "user authentication",
    "account authentication",
)
_UNCLAIMED_LIMIT: Final = 1024  # refused core publishes remembered per connection


@dataclass(frozen=True, slots=True)
class Refusal:
    """One refusal by the server.

    Attributes:
        operation: ``"publish"``, ``"subscribe"`` or ``"connect"``.
        subject: The subject refused, lower-cased (``""`` for ``"connect"``).
        queue: The queue group of a refused subscription, if any.
        sid: The server's ID of a subscription it removed (after a config reload).
        reason: The server's words.
    """

    operation: Operation
    subject: str
    queue: str | None
    sid: int | None
    reason: str

    def error(self, what: str) -> PermissionDenied:
        """The :class:`~goflux.PermissionDenied` for ``what`` (e.g. "publish to 'x'")."""
        return PermissionDenied(
            f"{what}: the server refused it ({self.reason})",
            operation=self.operation,
            subject=self.subject,
            reason=self.reason,
        )


def parse(error: Exception) -> Refusal | None:
    """The refusal an error from nats-py's error callback reports, if it is one."""
    text = str(error)
    lowered = text.lower()
    match = _VIOLATION.search(lowered)
    reason = lowered.removeprefix("nats: ").strip().strip("'")
    if match is not None:
        operation: Operation = "publish" if match.group(1) == "publish" else "subscribe"
        sid = match.group(4)
        return Refusal(operation, match.group(2), match.group(3), int(sid) if sid else None, reason)
    if any(words in lowered for words in _CREDENTIALS):
        return Refusal("connect", "", None, None, reason)
    return None


class Refusals:
    """The refusals of one connection, routed to whoever waits on their subject.

    Attributes:
        last: The most recent refusal.
        count: Refusals seen so far.
    """

    __slots__ = (
        "__weakref__",
        "_by_subject",
        "_connection",
        "_observers",
        "_prefixes",
        "_unclaimed",
        "count",
        "last",
    )

    def __init__(self) -> None:
        self._by_subject: dict[tuple[str, str], list[Listener]] = {}
        self._prefixes: list[tuple[str, str, Listener]] = []
        self._connection: list[Listener] = []
        self._observers: list[Listener] = []
        self._unclaimed: OrderedDict[str, Refusal] = OrderedDict()
        self.last: Refusal | None = None
        self.count = 0

    def listen(self, operation: Operation, subject: str, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with each refusal of ``operation`` on ``subject``.

        ``"connect"`` listens for refused credentials (``subject`` is ignored).
        Returns the function that stops listening.
        """
        if operation == "connect":
            self._connection.append(listener)
            return lambda: _discard(self._connection, listener)
        key = (operation, subject.lower())
        listeners = self._by_subject.setdefault(key, [])
        listeners.append(listener)

        def remove() -> None:
            _discard(listeners, listener)
            if not listeners and self._by_subject.get(key) is listeners:
                del self._by_subject[key]

        return remove

    def listen_prefix(
        self, operation: Operation, prefix: str, listener: Listener
    ) -> Callable[[], None]:
        """Call ``listener`` with each refusal of ``operation`` on a subject under ``prefix``.

        Returns the function that stops listening.
        """
        entry = (operation, prefix.lower(), listener)
        self._prefixes.append(entry)
        return lambda: _discard(self._prefixes, entry)

    def observe(self, listener: Listener) -> Callable[[], None]:
        """Call ``listener`` with every refusal, without claiming it.

        Returns the function that stops observing.
        """
        self._observers.append(listener)
        return lambda: _discard(self._observers, listener)

    def take(self, subject: str) -> Refusal | None:
        """Remove and return a refused publish to ``subject`` that nobody waited for."""
        if not self._unclaimed:
            return None
        return self._unclaimed.pop(subject.lower(), None)

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
        claimed = False
        for listener in list(self._by_subject.get((refusal.operation, refusal.subject), ())):
            listener(refusal)
            claimed = True
        for operation, prefix, listener in list(self._prefixes):
            if operation == refusal.operation and refusal.subject.startswith(prefix):
                listener(refusal)
                claimed = True
        if not claimed and refusal.operation == "publish":
            self._unclaimed[refusal.subject] = refusal
            self._unclaimed.move_to_end(refusal.subject)
            if len(self._unclaimed) > _UNCLAIMED_LIMIT:
                self._unclaimed.popitem(last=False)

    def guard(
        self, operation: Operation, subject: str, what: str, *, prefix: bool = False
    ) -> Guard:
        """A ``with`` block that fails with PermissionDenied once ``subject`` is refused.

        With ``prefix=True``, a refusal of any subject under ``subject`` counts.
        """
        return Guard(self, operation, subject, what, prefix=prefix)


def _discard(items: list[Item], item: Item) -> None:
    with contextlib.suppress(ValueError):
        items.remove(item)


class Guard:
    """Fails the block it guards with :class:`~goflux.PermissionDenied` on a refusal.

    Like :func:`asyncio.timeout`, it cancels the task running the block when the
    server refuses the guarded subject, and turns that cancellation into the error
    on the way out; a cancellation from elsewhere passes through untouched.
    """

    __slots__ = (
        "_operation",
        "_prefix",
        "_refusal",
        "_refusals",
        "_remove",
        "_subject",
        "_task",
        "_what",
    )

    def __init__(
        self, refusals: Refusals, operation: Operation, subject: str, what: str, *, prefix: bool
    ) -> None:
        self._refusals = refusals
        self._prefix = prefix
        self._operation = operation
        self._subject = subject
        self._what = what
        self._task: asyncio.Task[object] | None = None
        self._refusal: Refusal | None = None
        self._remove: Callable[[], None] | None = None

    def __enter__(self) -> Guard:
        self._task = asyncio.current_task()
        listen = self._refusals.listen_prefix if self._prefix else self._refusals.listen
        self._remove = listen(self._operation, self._subject, self._refused)
        return self

    def _refused(self, refusal: Refusal) -> None:
        if self._refusal is None and self._task is not None:
            self._refusal = refusal
            self._task.cancel()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._remove is not None:
            self._remove()
        refusal = self._refusal
        if refusal is None or self._task is None:
            return
        if self._task.uncancel() > 0:
            return  # cancelled from elsewhere too: that cancellation wins
        raise refusal.error(self._what) from exc


_REGISTRIES: weakref.WeakKeyDictionary[Client, Refusals] = weakref.WeakKeyDictionary()


def refusals(nc: Client) -> Refusals:
    """The refusals of ``nc``; the first call starts watching its error callback.

    The callback ``nc`` had (the user's ``error_cb``, or nats-py's default, which logs)
    keeps being called with every error, after goflux has routed it.
    """
    registry = _REGISTRIES.get(nc)
    if registry is not None:
        return registry
    registry = Refusals()
    _REGISTRIES[nc] = registry
    original = error_callback(nc)

    async def on_error(error: Exception) -> None:
        refusal = parse(error)
        if refusal is not None:
            registry.dispatch(refusal)
        if original is not None:
            await original(error)

    set_error_callback(nc, on_error)
    return registry


def closed_reason(nc: Client) -> str:
    """Why ``nc`` stopped, in the server's words where it gave any (``""`` otherwise).

    For example ``" (the server said: maximum subscriptions exceeded)"``, ready to
    append to an error message.
    """
    error = nc.last_error
    if error is None:
        return ""
    text = str(error).removeprefix("nats: ").strip("'\" ")
    if not text:
        text = type(error).__name__
    return f" (the server said: {text})"
