"""What goflux records matches the table of Go goflux's names in docs/telemetry.md.

The tables of the section "Go goflux's names" list every metric and attribute Go
goflux records (from its code) and goflux's name for it. One scenario on a real
nats-server (a JetStream publish; an ack, a plain nak, a nak with delay and a term; a
core NATS request; a channel message whose handler fails) is recorded with the SDK's
in-memory reader and span exporter, and every recorded name, unit, attribute key and
value is checked against the tables: the doc and the code cannot drift apart.
"""

from __future__ import annotations

import asyncio
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext
from opentelemetry.sdk.metrics.export import Gauge, Histogram, Metric, NumberDataPoint, Sum

from goflux import Message, SettlementError, StrCodec
from goflux.transports import channel, jetstream
from goflux.transports import nats as gnats
from tests.conftest import STREAM, Otel
from tests.telemetry.held import hold_one

pytestmark = pytest.mark.timeout(60)

DOC = Path(__file__).resolve().parents[2] / "docs" / "telemetry.md"
SECTION = "## Go goflux's names"
KEY = re.compile(r"`([^`]+)`(\s*\(([^)]*)\))?")
INSTRUMENTS = {"counter": Sum, "histogram": Histogram, "observable gauge": Gauge}
NOT_IN_THE_SCENARIO = {
    # HTTP spans: covered by tests/transports/http (the scenario runs no HTTP server).
    "http.response.status_code",
}


@dataclass(frozen=True)
class Keys:
    """The attribute keys of a table cell: those always there, and all of them."""

    required: frozenset[str]
    every: frozenset[str]


def keys(cell: str) -> Keys:
    """The keys of a cell; a key followed by parentheses is recorded only sometimes."""
    required, every = set(), set()
    for match in KEY.finditer(cell):
        every.add(match[1])
        if match[2] is None:
            required.add(match[1])
    return Keys(frozenset(required), frozenset(every))


def tables() -> list[list[dict[str, str]]]:
    """The tables of the section, each a list of rows keyed by header."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index(SECTION) :]
    section = section[: section.index("\n## ", len(SECTION))]
    found: list[list[dict[str, str]]] = []
    lines: list[str] = []
    for line in [*section.splitlines(), ""]:
        if line.startswith("|"):
            lines.append(line)
            continue
        if lines:
            cells = [[c.strip() for c in row.strip().strip("|").split("|")] for row in lines]
            header, rows = cells[0], cells[2:]
            found.append([dict(zip(header, row, strict=True)) for row in rows])
            lines = []
    return found


def named(row: dict[str, str], go_column: str) -> tuple[str, str | None]:
    """Go's name and goflux's (None: goflux does not record it)."""
    go = keys(row[go_column]).every
    assert len(go) == 1, row
    [go_name] = go
    ours = row["goflux's name"]
    if ours == "same":
        return go_name, go_name
    if ours == "—":
        return go_name, None
    [our_name] = keys(ours).every
    return go_name, our_name


def values(cell: str, go: str) -> set[str] | None:
    """The enumerated values of a cell (``same``: Go's), None if it enumerates none."""
    if cell == "same":
        cell = go
    found = {m[1] for m in KEY.finditer(cell)}
    return found or None


def number(point: object) -> int:
    assert isinstance(point, NumberDataPoint)
    return int(point.value)


def text(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def test_the_doc_has_both_tables_and_says_why_where_names_differ() -> None:
    metrics, attributes = tables()
    assert {named(r, "Go goflux metric")[0] for r in metrics} >= {
        "messaging.client.sent.messages",
        "messaging.client.consumed.messages",
        "messaging.client.operation.duration",
        "messaging.process.duration",
        "goflux.processor.ack.outcome",
        "goflux.consumer.lag",
    }
    for row in metrics:
        go, ours = named(row, "Go goflux metric")
        missing = keys(row["Go's attributes"]).every - keys(row["goflux's attributes"]).every
        if ours != go or missing:
            assert row["why not the same"], f"{go}: differs and the row does not say why"
    for row in attributes:
        go, ours = named(row, "Go goflux attribute")
        ours_values = row["goflux's values"]
        theirs = values(row["Go's values"], row["Go's values"])
        if ours != go or (ours_values != "same" and values(ours_values, "") != theirs):
            assert row["why not the same"], f"{go}: differs and the row does not say why"


async def test_recorded_names_units_and_attributes_match_the_doc(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    tel = otel.telemetry
    # JetStream: one publish each of four messages; an ack, a plain nak (acked when
    # it comes back), a nak with delay and a term.
    publisher = jetstream.Publisher(js, StrCodec(), telemetry=tel)
    for body in ("ack", "nak", "delay", "term"):
        await publisher.publish("orders.created", body, message_id=f"id-{body}")
    settled = 0
    all_settled = asyncio.Event()

    async def settle(msg: Message[str]) -> None:
        nonlocal settled
        again = msg.delivery is not None and msg.delivery.num_delivered > 1
        if msg.payload == "ack" or (msg.payload == "nak" and again):
            await msg.ack()
        elif msg.payload == "nak":
            await msg.nak()
        elif msg.payload == "delay":
            await msg.nak(60.0)  # not back within the test
        else:
            await msg.term("done")
        settled += 1
        if settled == 5:
            all_settled.set()

    subscriber = jetstream.Subscriber(js, StrCodec(), stream=STREAM, manual_ack=True, telemetry=tel)
    # Core NATS request/reply, and a channel message.
    responder = gnats.Responder(nc, StrCodec(), StrCodec(), telemetry=tel)
    requester = gnats.Requester(nc, StrCodec(), StrCodec(), telemetry=tel)
    bus = channel.Bus(codec=StrCodec())
    delivered = asyncio.Event()

    async def arrived(msg: Message[str]) -> None:
        delivered.set()
        raise RuntimeError("a failure, for error.type")

    async def upper(request: str) -> str:
        return request.upper()

    async with (
        subscriber,
        channel.Subscriber(bus, telemetry=tel) as channel_sub,
        channel.Publisher(bus, telemetry=tel) as channel_pub,
    ):
        subscription = await subscriber.start("orders.created", settle)
        served = await responder.start("math.upper", upper)
        await channel_sub.start("events.created", arrived)
        async with asyncio.timeout(20):
            await all_settled.wait()
        # Outside the timeout: a request is never cancelled, it has its own timeout.
        assert await requester.request("math.upper", "abc", message_id="r-1") == "ABC"
        await channel_pub.publish("events.created", "e-1")
        async with asyncio.timeout(20):
            await delivered.wait()
        recorded = otel.metrics()  # while the subscriptions run: the gauges report
        await subscription.stop()
        await served.stop()

    spans = [dict(span.attributes or {}) for span in otel.spans()]
    points = [
        (metric.name, dict(point.attributes or {}))
        for metric in recorded.values()
        for point in metric.data.data_points
    ]
    metric_rows, attribute_rows = tables()

    for row in metric_rows:
        go, ours = named(row, "Go goflux metric")
        assert ours is not None, f"{go}: every Go metric is recorded"
        assert ours in recorded, f"{ours} not recorded; recorded: {sorted(recorded)}"
        metric: Metric = recorded[ours]
        unit = "" if row["unit"] == "(none)" else keys(row["unit"]).every
        assert {metric.unit} == ({""} if unit == "" else unit), f"{ours}: unit {metric.unit!r}"
        assert isinstance(metric.data, INSTRUMENTS[row["instrument"]]), ours
        expected = keys(row["goflux's attributes"])
        assert metric.data.data_points, ours
        for point in metric.data.data_points:
            found = set(point.attributes or {})
            assert expected.required <= found <= expected.every, (ours, sorted(found))

    for row in attribute_rows:
        go, ours = named(row, "Go goflux attribute")
        seen = {text(a[go]) for a in spans if go in a} | {text(a[go]) for _, a in points if go in a}
        if ours is None:
            assert not seen, f"{go} is recorded, but the doc says it is not"
            continue
        seen = {text(a[ours]) for a in spans if ours in a}
        seen |= {text(a[ours]) for _, a in points if ours in a}
        if ours not in NOT_IN_THE_SCENARIO:
            assert seen, f"{ours} is recorded nowhere in the scenario"
        allowed = values(row["goflux's values"], row["Go's values"])
        if allowed is not None:
            assert seen <= allowed, (ours, seen - allowed)

    # The scenario's values: every Go action once or more, and each transport's system.
    outcomes: Counter[tuple[str, str]] = Counter()
    for point in recorded["goflux.processor.ack.outcome"].data.data_points:
        attrs = point.attributes or {}
        assert attrs["messaging.destination.name"] == "orders.created"
        outcomes[text(attrs["goflux.ack.action"]), text(attrs["goflux.ack.error"])] += number(point)
    assert outcomes == {
        ("ack", "false"): 2,
        ("nak", "false"): 1,
        ("nak_with_delay", "false"): 1,
        ("term", "false"): 1,
    }
    # The deprecated alias is still recorded, by goflux's outcomes.
    alias: Counter[str] = Counter()
    for point in recorded["goflux.consumer.settlements"].data.data_points:
        alias[text((point.attributes or {})["goflux.settlement.outcome"])] += number(point)
    assert alias == {"ack": 2, "nak": 2, "term": 1}
    systems = {text(a["messaging.system"]) for a in spans}
    assert systems == {"nats-jetstream", "nats", "go_channel"}
    lag = {
        text((p.attributes or {})["messaging.destination.name"])
        for p in recorded["goflux.consumer.lag"].data.data_points
    }
    assert lag == {"orders.created", "math.upper", "events.created"}
    # Go's reply keys: the requester's span has both, the responder's the size.
    [request] = [a for a in spans if "goflux.reply.subject" in a]
    assert request["goflux.reply.body.size"] == 3
    assert str(request["goflux.reply.subject"]).startswith("_INBOX.")
    [answer] = [
        a for a in spans if a.get("messaging.operation.name") == "process" and
        a.get("messaging.destination.name") == "math.upper"
    ]  # fmt: skip
    assert answer["goflux.reply.body.size"] == 3


async def test_a_settlement_that_cannot_be_sent_counts_with_ack_error_true(
    nc: Client, js: JetStreamContext, otel: Otel
) -> None:
    held, subscription = await hold_one(js, otel)
    await nc.close()
    with pytest.raises(SettlementError, match="could not nak message"):
        await held.nak(5.0)
    data = otel.metrics()["goflux.processor.ack.outcome"].data
    assert isinstance(data, Sum)
    assert [(dict(p.attributes or {}), number(p)) for p in data.data_points] == [
        (
            {
                "goflux.ack.action": "nak_with_delay",
                "goflux.ack.error": True,
                "messaging.destination.name": "orders.created",
            },
            1,
        )
    ]
    await subscription.stop()
