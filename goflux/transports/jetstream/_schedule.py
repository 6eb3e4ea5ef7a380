"""Message schedules (ADR-51): a stream that publishes a message later, or again and again.

A schedule is a message on a subject of its own (one schedule per subject) whose
``Nats-Schedule`` header says when, and whose ``Nats-Schedule-Target`` names the
subject, in the same stream, the server publishes it to. The server copies the
schedule message's body and headers to each message it produces (all but its own
``Nats-Schedule*``, ``Nats-Expected-*``, ``Nats-Msg-Id``, ``Nats-TTL`` and
``Nats-Rollup`` headers, adding ``Nats-Scheduler`` and ``Nats-Schedule-Next``), so
the codec's content type, the user headers and the producer's trace context
(``traceparent``) arrive with it.

:class:`Schedule` is the typed ``Nats-Schedule`` value; :func:`schedule_headers` adds
it to a publish's server headers (checked, so the publisher's version check and
canonical spelling apply); :func:`explain_refusal` names the schedule in the
server's refusal; :func:`cancel_schedule` ends a schedule by deleting its message (by
sequence, and only a message that is a schedule).
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final, Literal, cast

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.errors import APIError

from goflux._errors import InvalidHeader, PublishError
from goflux._subjects import is_wildcard, validate_pattern, validate_subject
from goflux.transports._natspy import connection
from goflux.transports.jetstream._acker import delivery_of
from goflux.transports.jetstream._api import (
    ApiCall,
    api_request,
    check_name,
    message_get,
    provisioning_error,
    to_rfc3339,
)
from goflux.transports.jetstream._errors import InvalidSchedule, NotASchedule
from goflux.transports.jetstream._features import SCHEDULES, require
from goflux.transports.jetstream._server_headers import TTL, ttl_value
from goflux.transports.jetstream._status import MSG_DELETE_FAILED, SEQUENCE_NOT_FOUND
from goflux.transports.jetstream._stored import scan

__all__ = (
    "Schedule",
    "cancel_schedule",
    "explain_batch_refusal",
    "explain_refusal",
    "schedule_headers",
)

SCHEDULE: Final = "Nats-Schedule"
TARGET: Final = "Nats-Schedule-Target"
SCHEDULE_TTL: Final = "Nats-Schedule-TTL"
TIME_ZONE: Final = "Nats-Schedule-Time-Zone"
SCHEDULER: Final = "Nats-Scheduler"  # on a produced message: the schedule's subject
# Set from a Schedule, so refused by hand beside schedule=; Nats-Schedule-Source and
# Nats-Schedule-Rollup (nats-server 2.14) have no Schedule field and may go by hand.
_OWNED: Final = frozenset(name.lower() for name in (SCHEDULE, TARGET, SCHEDULE_TTL, TIME_ZONE))
_GONE: Final = re.compile(r"no message found|not found|store EOF")  # the store's words (10057)
_CANCEL_RETRIES: Final = 3  # a schedule replaced while being cancelled: look again

PREDEFINED: Final = frozenset(
    {"@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly"}
)
"""The named cron schedules the server knows (``@hourly`` is ``0 0 * * * *``)."""

_CRON_FIELDS: Final = 6
_OFFSET: Final = re.compile(r"[+-]?\d")  # "+02:00", "-5": Go's LoadLocation takes none


@dataclass(frozen=True, slots=True)
class Schedule:
    """When a stream publishes a scheduled message: once, at an interval, or by cron.

    Make one with :meth:`at`, :meth:`every` or :meth:`cron` and pass it to
    :meth:`~goflux.transports.jetstream.Publisher.publish` (or an
    :class:`~goflux.transports.jetstream.Outgoing`) with ``schedule=`` and
    ``target=``. One-shot schedules need nats-server 2.12, the others 2.14.

    Attributes:
        kind: ``"at"``, ``"every"`` or ``"cron"``.
        pattern: The ``Nats-Schedule`` value (``"@at 2030-01-01T00:00:00.000000Z"``,
            ``"@every 1s"``, ``"0 */5 * * * *"``, ``"@hourly"``).
        time_zone: The time zone of a cron schedule (an IANA name such as
            ``"Europe/Berlin"``), None for UTC.
        ttl: The time to live of each message the schedule produces
            (``Nats-Schedule-TTL``; the stream needs ``allow_msg_ttl``), None for none.
    """

    kind: Literal["at", "every", "cron"]
    pattern: str
    time_zone: str | None = None
    ttl: TTL | None = None

    @classmethod
    def at(cls, when: datetime, *, ttl: TTL | None = None) -> Schedule:
        """Publish once, at ``when`` (immediately if that has passed).

        Args:
            when: A timezone-aware moment; the server keeps it in UTC.
            ttl: The produced message's time to live (whole seconds, at least 1).

        Raises:
            TypeError: ``when`` is not a ``datetime``.
            ValueError: ``when`` is naive (its time zone would be a guess), or outside
                the years 1 to 9999 once in UTC (``datetime.max`` west of UTC), or
                ``ttl`` is out of range.
        """
        if not isinstance(when, datetime):
            raise TypeError(f"Schedule.at takes a datetime, got {when!r}")
        if when.tzinfo is None or when.utcoffset() is None:
            raise ValueError(
                f"Schedule.at({when!r}): the datetime has no time zone; give an aware one "
                "(e.g. datetime.now(UTC) + timedelta(minutes=5))"
            )
        return cls("at", f"@at {to_rfc3339(when)}", ttl=_checked_ttl(ttl))

    @classmethod
    def every(cls, interval: timedelta | float, *, ttl: TTL | None = None) -> Schedule:
        """Publish every ``interval``, from when the schedule is stored (nats-server 2.14).

        The server rounds the first firing to a whole second, and takes intervals of
        at least a second (a fraction above that is kept, to the microsecond).

        Args:
            interval: A ``timedelta``, or seconds.
            ttl: Each produced message's time to live (whole seconds, at least 1).

        Raises:
            TypeError: ``interval`` is neither a ``timedelta`` nor a number.
            ValueError: ``interval`` is below a second (the server refuses it), or
                ``ttl`` is out of range.
        """
        if isinstance(interval, timedelta):
            micros = interval // timedelta(microseconds=1)
        elif isinstance(interval, int | float) and not isinstance(interval, bool):
            if not math.isfinite(interval):
                raise ValueError(f"Schedule.every: the interval must be finite, got {interval!r}")
            micros = round(interval * 1_000_000)
        else:
            raise TypeError(f"Schedule.every takes a timedelta or seconds, got {interval!r}")
        if micros < 1_000_000:
            raise ValueError(
                f"Schedule.every({interval!r}): the interval must be at least a second "
                "(the server refuses shorter ones)"
            )
        seconds, rest = divmod(micros, 1_000_000)
        duration = f"{seconds}s" if not rest else f"{micros}us"  # Go's time.ParseDuration
        return cls("every", f"@every {duration}", ttl=_checked_ttl(ttl))

    @classmethod
    def cron(
        cls, expression: str, *, time_zone: str | None = None, ttl: TTL | None = None
    ) -> Schedule:
        """Publish whenever ``expression`` matches (nats-server 2.14).

        Six fields, seconds first: ``second minute hour day-of-month month
        day-of-week`` (``"*/5 * * * * *"``: every five seconds), or a predefined
        ``@yearly``, ``@monthly``, ``@weekly``, ``@daily``, ``@hourly``. The field
        count is checked here; the server judges the rest, and its refusal raises
        :class:`~goflux.transports.jetstream.InvalidSchedule` naming the expression.

        Args:
            expression: The cron expression.
            time_zone: The time zone the expression is read in: an IANA name
                (``"America/New_York"``) the server's tzdata knows; None for UTC.
                Fixed offsets (``"+02:00"``) are not accepted by the server.
            ttl: Each produced message's time to live (whole seconds, at least 1).

        Raises:
            TypeError: ``expression`` or ``time_zone`` is not a ``str``.
            ValueError: Not six fields nor a predefined name, an ``@at``/``@every``
                form (use :meth:`at`, :meth:`every`), an empty time zone or a fixed
                offset, or ``ttl`` out of range.
        """
        if not isinstance(expression, str):
            raise TypeError(f"Schedule.cron takes a str, got {expression!r}")
        pattern = " ".join(expression.split())
        if pattern.startswith("@"):
            if pattern.startswith(("@at", "@every")):
                raise ValueError(
                    f"Schedule.cron({expression!r}): use Schedule.at or Schedule.every for "
                    "that form"
                )
            if pattern not in PREDEFINED:
                raise ValueError(
                    f"Schedule.cron({expression!r}): not a predefined schedule; the server "
                    f"knows {', '.join(sorted(PREDEFINED))}"
                )
        elif (count := len(pattern.split())) != _CRON_FIELDS:
            hint = " (the server's cron has a seconds field first: try '0 ' + it)"
            raise ValueError(
                f"Schedule.cron({expression!r}): {count} fields, the server takes 6: "
                "second minute hour day-of-month month day-of-week"
                + (hint if count == _CRON_FIELDS - 1 else "")
            )
        if time_zone is not None:
            if not isinstance(time_zone, str):
                raise TypeError(f"Schedule.cron: time_zone must be a str, got {time_zone!r}")
            if not time_zone or time_zone != time_zone.strip() or " " in time_zone:
                raise ValueError(
                    f"Schedule.cron({expression!r}): time_zone {time_zone!r} is not a zone "
                    "name; leave it out for UTC"
                )
            if _OFFSET.match(time_zone):
                raise ValueError(
                    f"Schedule.cron({expression!r}): time_zone {time_zone!r} is a fixed "
                    "offset, which the server refuses; give an IANA name (Europe/Berlin)"
                )
        return cls("cron", pattern, time_zone=time_zone, ttl=_checked_ttl(ttl))

    @property
    def recurring(self) -> bool:
        """Whether the schedule publishes more than once (every form but :meth:`at`)."""
        return self.kind != "at"

    def headers(self, target: str) -> dict[str, str]:
        """The server headers of a schedule message publishing to ``target``."""
        out = {SCHEDULE: self.pattern, TARGET: target}
        if self.time_zone is not None:
            out[TIME_ZONE] = self.time_zone
        if self.ttl is not None:
            out[SCHEDULE_TTL] = ttl_value(self.ttl)
        return out

    def __str__(self) -> str:
        zone = f" ({self.time_zone})" if self.time_zone else ""
        return f"{self.pattern}{zone}"


def _checked_ttl(ttl: TTL | None) -> TTL | None:
    if ttl is not None:
        ttl_value(ttl)  # raises ValueError now, not at publish time
    return ttl


def schedule_headers(
    given: Mapping[str, str] | None,
    schedule: Schedule | None,
    target: str | None,
    subject: str,
) -> Mapping[str, str] | None:
    """A publish's server headers ``given`` with those of ``schedule`` to ``target`` added.

    Returns ``given`` as it is when there is no schedule. ``given`` may hold
    ``Nats-Schedule-Source`` and ``Nats-Schedule-Rollup`` (no :class:`Schedule` field
    sets them), not the headers a :class:`Schedule` sets.

    Raises:
        TypeError: ``schedule`` is not a :class:`Schedule`.
        ValueError: ``schedule`` without ``target`` or the other way round, or
            ``target`` is ``subject`` itself (the server refuses it).
        InvalidSubject: ``target`` is not a valid publish subject.
        InvalidHeader: ``given`` has a header the schedule sets as well
            (``Nats-Schedule``, ``-Target``, ``-TTL``, ``-Time-Zone``).
    """
    if schedule is None:
        if target is not None:
            raise ValueError(f"publish to {subject!r}: target={target!r} needs a schedule=")
        return given
    if not isinstance(schedule, Schedule):
        raise TypeError(
            f"publish to {subject!r}: schedule must be a Schedule "
            f"(Schedule.at, .every, .cron), got {schedule!r}"
        )
    if target is None:
        raise ValueError(
            f"publish to {subject!r}: schedule={schedule} needs target=, the subject (of "
            "the same stream) it publishes to"
        )
    validate_subject(target)
    if target == subject:
        raise ValueError(
            f"publish to {subject!r}: the target of a schedule must be another subject "
            "than the schedule's own"
        )
    merged = dict(given) if given else {}
    for name in merged:
        if name.lower() in _OWNED:
            raise InvalidHeader(
                f"publish to {subject!r}: server header {name!r} is set by schedule= and "
                "target=; leave it out"
            )
    merged.update(schedule.headers(target))
    return merged


def explain_refusal(
    error: PublishError,
    schedule: Schedule | None,
    target: str | None,
    *,
    subject: str | None = None,
) -> PublishError:
    """``error``, naming ``schedule`` and ``target`` if the server refused the schedule.

    ``subject`` is the schedule's own subject where ``error`` names another (the
    commit of an atomic batch).
    """
    if schedule is None or not isinstance(error, InvalidSchedule) or error.schedule:
        return error
    what = {
        "pattern": f"the schedule {schedule.pattern!r} is not one it takes",
        "target": (
            f"the target {target!r} must be a subject of stream {error.stream!r} other "
            "than the schedule's own"
        ),
        "ttl": f"the TTL {schedule.ttl!r} of the produced messages is not one it takes",
        "time_zone": (
            f"the time zone {schedule.time_zone!r} of {schedule.pattern!r} is unknown to "
            "the server (its tzdata), or the schedule is not a cron one"
        ),
    }.get(error.reason, f"its {error.reason} is not one it takes")
    if subject is not None and subject != error.subject:
        what += f" (the schedule on {subject!r})"
    explained = InvalidSchedule(
        f"{error}: {what}",
        subject=subject or error.subject,
        stream=error.stream,
        reason=error.reason,
        schedule=schedule.pattern,
        target=target or "",
        err_code=error.err_code,
    )
    explained.__cause__ = error
    return explained


def explain_batch_refusal(
    error: InvalidSchedule,
    index: int,
    items: Sequence[tuple[str, Schedule | None, str | None]],
) -> InvalidSchedule:
    """``error`` of an atomic batch, naming the schedule and target it refused.

    The server checks a batch's schedules at its commit, so the message ``index`` it
    names (the commit) may not be the one whose schedule it refused: with one schedule
    in the batch, that one is named (and its subject); with several, the error lists
    them. A message refused before the commit is named as it is.
    ``items`` are the batch's ``(subject, schedule, target)``, in order.
    """
    scheduled = [item for item in items if item[1] is not None]
    if index < len(items) - 1 and items[index][1] is not None:
        scheduled = [items[index]]  # refused before the commit: this message's own
    if len(scheduled) == 1:
        [(subject, schedule, target)] = scheduled
        explained = explain_refusal(error, schedule, target, subject=subject)
        return explained if isinstance(explained, InvalidSchedule) else error
    listed = ", ".join(
        f"message {i + 1}: {s} to {t!r}" for i, (_, s, t) in enumerate(items) if s is not None
    )
    named = InvalidSchedule(
        f"{error}: one of the batch's schedules ({listed})",
        subject=error.subject,
        stream=error.stream,
        reason=error.reason,
        err_code=error.err_code,
    )
    named.__cause__ = error
    return named


async def cancel_schedule(js: JetStreamContext, *, stream: str, subject: str) -> int:
    """End the schedule on ``subject`` of ``stream`` by deleting its schedule message.

    A schedule lives as long as its message is stored, so deleting it stops it (a
    one-shot schedule that has fired is gone already). Only a message that is a
    schedule (it carries ``Nats-Schedule``) is deleted, by its sequence, so an
    ordinary message on the subject, or one stored there after the schedule was
    read, is never touched. Messages the schedule produced stay on their target.

    A literal ``subject`` whose last message is not a schedule raises
    :class:`~goflux.transports.jetstream.NotASchedule`. A wildcard ``subject``
    (``"schedules.orders.>"``) reads the last message of every subject it matches
    and ends those that are schedules, passing over the others.

    Args:
        js: The JetStream context.
        stream: The stream holding the schedule.
        subject: The schedule's subject (wildcards allowed).

    Returns:
        How many schedules were ended (0: none was there).

    Raises:
        ValueError: ``stream`` cannot name a stream.
        InvalidSubject: ``subject`` is not a valid subject.
        NotASchedule: ``subject`` is literal and its last message is no schedule (an
            ordinary message, or one another schedule produced there); nothing
            deleted.
        FeatureUnsupported: The server is older than 2.12 (it has no schedules).
        StreamNotFound: No such stream.
        PermissionDenied: The server refused a request.
        ProvisioningError: Any other refusal by the server (a stream that denies
            deletes).
        TransportError: No answer in time, or the connection closed.
    """
    check_name("stream", stream)
    validate_pattern(subject)
    what = f"cancelling the schedule {subject!r} of stream {stream!r}"
    require(connection(js), SCHEDULES, what, subject=subject)
    if is_wildcard(subject):
        return await _cancel_matching(js, stream, subject, what)
    for attempt in range(_CANCEL_RETRIES):
        with ApiCall(js, f"stream {stream!r}", f"STREAM.MSG.GET.{stream}"):
            try:
                last = await message_get(js, stream, {"last_by_subj": subject})
            except APIError as exc:
                raise provisioning_error(exc, what) from exc
        if last is None:
            return 0
        if not (last.headers and SCHEDULE in last.headers):
            if attempt:  # the schedule read before is gone, replaced by no schedule
                return 0
            scheduler = (last.headers or {}).get(SCHEDULER)
            produced = (
                f" (the schedule on {scheduler!r} produced it: a schedule stored on "
                f"{subject!r} before it may still run; delete that one by its sequence)"
                if scheduler
                else ""
            )
            raise NotASchedule(
                f"{what}: its last message (sequence {last.sequence}) has no "
                f"{SCHEDULE} header, so it is not a schedule{produced}; nothing deleted",
                stream=stream,
                subject=subject,
                sequence=last.sequence,
            )
        if await _delete(js, stream, last.sequence, what):
            return 1
    return 0


async def _cancel_matching(js: JetStreamContext, stream: str, pattern: str, what: str) -> int:
    """End every schedule that is the last message of a subject matching ``pattern``."""
    # scan() is an async generator: closed, it deletes its consumer at once.
    messages = cast(
        "AsyncGenerator[Msg, None]",
        scan(js, stream, pattern, deliver="last_per_subject", headers_only=True),
    )
    cancelled = 0
    tails = (f"CONSUMER.CREATE.{stream}", f"CONSUMER.MSG.NEXT.{stream}")
    with ApiCall(js, f"stream {stream!r}", *tails):
        try:
            async with contextlib.aclosing(messages):
                async for msg in messages:
                    if msg.headers and SCHEDULE in msg.headers:
                        sequence = delivery_of(msg.reply).stream_sequence
                        cancelled += await _delete(js, stream, sequence, what)
        except APIError as exc:
            raise provisioning_error(exc, what) from exc
    return cancelled


async def _delete(js: JetStreamContext, stream: str, sequence: int, what: str) -> bool:
    """Delete message ``sequence``; False if it is gone already (fired, replaced)."""
    tail = f"STREAM.MSG.DELETE.{stream}"
    with ApiCall(js, f"stream {stream!r}", tail):
        try:
            await api_request(js, tail, {"seq": sequence, "no_erase": True})
        except APIError as exc:
            if exc.err_code == SEQUENCE_NOT_FOUND or (
                exc.err_code == MSG_DELETE_FAILED and _GONE.search(exc.description or "")
            ):
                return False
            raise provisioning_error(exc, what) from exc
    return True
