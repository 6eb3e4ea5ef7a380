from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from goflux import AlreadySettled, Delivery, Headers, Message


@dataclass
class RecordingAcker:
    """A real Acker implementation that records what the message asked for."""

    calls: list[tuple[str, object]] = field(default_factory=list)
    fail_next: bool = False
    delivery: Delivery | None = None

    async def _record(self, name: str, arg: object) -> None:
        if self.fail_next:
            self.fail_next = False
            raise ConnectionError("broker unreachable")
        self.calls.append((name, arg))

    async def ack(self) -> None:
        await self._record("ack", None)

    async def nak(self, delay: float | None) -> None:
        await self._record("nak", delay)

    async def term(self, reason: str | None) -> None:
        await self._record("term", reason)

    async def in_progress(self) -> None:
        await self._record("in_progress", None)


def test_fields() -> None:
    delivery = Delivery(
        stream="S",
        consumer="c",
        stream_sequence=5,
        consumer_sequence=2,
        num_delivered=1,
        num_pending=0,
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
    )
    msg = Message("a.b", 42, headers=Headers({"K": "v"}), id="m1", delivery=delivery, data=b"42")
    assert (msg.subject, msg.payload, msg.id, msg.data) == ("a.b", 42, "m1", b"42")
    assert msg.headers["k"] == "v"
    assert msg.delivery is delivery
    assert not msg.acknowledgeable
    assert "a.b" in repr(msg)


async def test_settling_twice_raises_even_without_a_broker() -> None:
    msg = Message("s", 1)
    assert msg.settled is None
    await msg.ack()
    assert msg.settled == "ack"
    for settle in (msg.ack, msg.nak, msg.term, msg.in_progress):
        with pytest.raises(AlreadySettled, match=r"already settled \(ack\)"):
            await settle()


@pytest.mark.parametrize(
    ("action", "expected"),
    [("ack", ("ack", None)), ("nak", ("nak", 2.5)), ("term", ("term", "poison"))],
)
async def test_settlement_reaches_the_acker(action: str, expected: tuple[str, object]) -> None:
    acker = RecordingAcker()
    msg = Message("s", 1, acker=acker)
    assert msg.acknowledgeable
    await msg.in_progress()
    if action == "ack":
        await msg.ack()
    elif action == "nak":
        await msg.nak(2.5)
    else:
        await msg.term("poison")
    assert acker.calls == [("in_progress", None), expected]
    with pytest.raises(AlreadySettled) as info:
        await msg.nak()
    assert info.value.outcome == action


async def test_failed_settlement_can_be_retried() -> None:
    acker = RecordingAcker(fail_next=True)
    msg = Message("s", 1, acker=acker)
    with pytest.raises(ConnectionError):
        await msg.ack()
    assert msg.settled is None
    await msg.ack()
    assert acker.calls == [("ack", None)]


@dataclass
class ConfirmingAcker(RecordingAcker):
    """An acker that can have an ack confirmed."""

    async def ack_confirmed(self) -> None:
        await self._record("ack_confirmed", None)


async def test_a_confirmed_ack_uses_the_acker_s_confirmation_or_falls_back_to_ack() -> None:
    confirming, plain = ConfirmingAcker(), RecordingAcker()
    await Message("s", 1, acker=confirming).ack(confirm=True)
    await Message("s", 1, acker=plain).ack(confirm=True)
    assert confirming.calls == [("ack_confirmed", None)]
    assert plain.calls == [("ack", None)]  # it cannot confirm: a plain ack
    unacknowledged = Message("s", 1)
    await unacknowledged.ack(confirm=True)  # nothing to confirm: a recorded no-op
    assert unacknowledged.settled == "ack"


async def test_negative_nak_delay_is_refused() -> None:
    msg = Message("s", 1)
    with pytest.raises(ValueError, match="delay"):
        await msg.nak(-1)
    assert msg.settled is None


def test_delivery_comes_from_the_acker_when_not_given() -> None:
    delivery = Delivery(
        stream="S",
        consumer="c",
        stream_sequence=1,
        consumer_sequence=1,
        num_delivered=2,
        num_pending=0,
        timestamp=datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert Message("s", 1, acker=RecordingAcker(delivery=delivery)).delivery is delivery
    assert Message("s", 1, acker=RecordingAcker()).delivery is None


@pytest.mark.parametrize("delay", [-1.0, float("nan"), float("inf"), 1e300])
async def test_nak_refuses_delays_the_broker_cannot_keep(delay: float) -> None:
    msg = Message("s", 1, acker=RecordingAcker())
    with pytest.raises(ValueError, match="nak delay"):
        await msg.nak(delay)
    assert msg.settled is None
