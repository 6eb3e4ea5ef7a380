"""``Message.wire_headers``: every header line as received, from any producer."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import nats
import pytest
from nats.aio.client import Client
from nats.js import JetStreamContext

from goflux import JsonCodec, Message
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.conftest import STREAM
from tests.helpers import raw_publish
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def raw_hpub(
    server: NatsServer,
    subject: str,
    lines: list[tuple[str, str]],
    body: bytes,
    *,
    first_line: bytes = b"NATS/1.0\r\n",
) -> None:
    """Publish with a hand-written HPUB: exactly these header lines, after ``first_line``."""
    await raw_publish(
        server.url,
        subject,
        b"".join(b"%s: %s\r\n" % (n.encode(), v.encode()) for n, v in lines),
        body,
        first_line=first_line,
    )


FOREIGN = [("Tenant", "acme"), ("Trace-Tag", "one"), ("Trace-Tag", "two")]


async def received_with_lines(
    server: NatsServer, js: JetStreamContext, lines: list[tuple[str, str]]
) -> Message[Order]:
    """What a JetStream subscriber's handler gets for an order sent with these header lines."""
    got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

    async def handle(msg: Message[Order]) -> None:
        got.set_result(msg)

    subscriber = jetstream.Subscriber(js, CODEC, stream=STREAM)
    async with await subscriber.start("orders.>", handle):
        await raw_hpub(server, "orders.raw", lines, CODEC.encode(order(1)))
        return await asyncio.wait_for(got, 10)


async def test_jetstream_handler_sees_every_foreign_header_line(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    msg = await received_with_lines(nats_server, js, FOREIGN)
    wire = msg.wire_headers
    assert wire.get_all("Tenant") == ["acme"]
    assert wire.get_all("trace-tag") == ["one", "two"]  # both lines, in wire order
    assert [(n, v) for n, v in wire.multi_items() if not n.startswith("Nats-")] == FOREIGN
    assert "Tenant" not in msg.headers  # goflux user headers stay X-Goflux- only
    assert msg.payload == order(1)


async def test_repeated_names_keep_their_first_spelling_and_group_in_first_seen_order(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    # As documented on Message.wire_headers: lookups ignore case, so a name's lines
    # are one entry, spelled as the first; each name's values stay in wire order.
    lines = [("A", "1"), ("B", "2"), ("a", "3"), ("x-dup", "c"), ("X-Dup", "d")]
    msg = await received_with_lines(nats_server, js, lines)
    wire = [(n, v) for n, v in msg.wire_headers.multi_items() if not n.startswith("Nats-")]
    assert wire == [("A", "1"), ("A", "3"), ("B", "2"), ("x-dup", "c"), ("x-dup", "d")]
    assert msg.wire_headers.get_all("X-DUP") == ["c", "d"]


async def test_goflux_headers_are_on_the_wire_as_sent(js: JetStreamContext) -> None:
    got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

    async def handle(msg: Message[Order]) -> None:
        got.set_result(msg)

    subscriber = jetstream.Subscriber(js, CODEC, stream=STREAM)
    async with await subscriber.start("orders.>", handle):
        await jetstream.Publisher(js, CODEC).publish(
            "orders.a", order(2), headers=[("Tag", "x"), ("Tag", "y")], message_id="m-2"
        )
        msg = await asyncio.wait_for(got, 10)
    assert msg.headers.get_all("Tag") == ["x", "y"]
    assert msg.wire_headers.get_all("X-Goflux-Tag") == ["x", "y"]
    assert msg.wire_headers["X-Message-ID"] == "m-2"
    assert msg.wire_headers["Nats-Msg-Id"] == "m-2"


async def test_core_nats_handler_sees_foreign_header_lines(
    nats_server: NatsServer, nc: Client
) -> None:
    got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

    async def handle(msg: Message[Order]) -> None:
        got.set_result(msg)

    async with await gnats.Subscriber(nc, CODEC).start("raw.>", handle):
        await raw_hpub(nats_server, "raw.a", FOREIGN, CODEC.encode(order(3)))
        msg = await asyncio.wait_for(got, 10)
    assert msg.wire_headers.multi_items() == FOREIGN


async def test_other_users_of_the_connection_still_get_nats_py_headers(
    nats_server: NatsServer, nc: Client
) -> None:
    gnats.Subscriber(nc, CODEC)  # installs the line keeping on nc
    sub = await nc.subscribe("plain")
    await nc.flush()  # subscribed on the server before the other connection publishes
    await raw_hpub(nats_server, "plain", FOREIGN, b"x")
    msg = await sub.next_msg(timeout=10)
    assert msg.headers == {"Tenant": "acme", "Trace-Tag": "two"}  # nats-py's dict, last wins


async def test_a_message_without_headers_has_empty_wire_headers(nats_server: NatsServer) -> None:
    nc = await nats.connect(nats_server.url)
    try:
        got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

        async def handle(msg: Message[Order]) -> None:
            got.set_result(msg)

        async with await gnats.Subscriber(nc, CODEC).start("bare", handle):
            await nc.publish("bare", CODEC.encode(order(4)))
            msg = await asyncio.wait_for(got, 10)
        assert len(msg.wire_headers) == 0
    finally:
        await nc.close()


Receive = Callable[..., Awaitable[Message[Order]]]


@pytest.fixture(params=["core NATS", "JetStream"])
def received_on(
    request: pytest.FixtureRequest, nats_server: NatsServer, nc: Client, js: JetStreamContext
) -> Receive:
    """What a goflux handler of core NATS (or JetStream) gets for an order sent with
    exactly ``lines`` (after ``first_line``)."""

    async def receive(
        lines: list[tuple[str, str]], *, first_line: bytes = b"NATS/1.0\r\n"
    ) -> Message[Order]:
        got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

        async def handle(msg: Message[Order]) -> None:
            got.set_result(msg)

        subscriber: gnats.Subscriber[Order] | jetstream.Subscriber[Order]
        if request.param == "JetStream":  # (its pull engine reads a block when needed)
            subscriber, subject = jetstream.Subscriber(js, CODEC, stream=STREAM), "orders.odd"
        else:
            subscriber, subject = gnats.Subscriber(nc, CODEC), "odd"
        async with await subscriber.start(subject, handle):
            body = CODEC.encode(order(5))
            await raw_hpub(nats_server, subject, lines, body, first_line=first_line)
            return await asyncio.wait_for(got, 10)

    return receive


async def test_goflux_headers_of_a_foreign_block_reach_the_handler(received_on: Receive) -> None:
    lines = [
        ("x-goflux-tag", "a"),
        ("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        ("X-GOFLUX-Tag", " b "),
        ("Nats-Msg-Id", "n-1"),
        ("X-Goflux-Caf\u00e9", "x"),
    ]
    msg = await received_on(lines)
    assert msg.headers.multi_items() == [("tag", "a"), ("tag", "b")]  # (the first casing)
    assert msg.id == "n-1"  # Nats-Msg-Id where no X-Message-ID came
    assert msg.wire_headers.get_all("X-Goflux-Tag") == ["a", "b"]
    assert msg.wire_headers.multi_items()[-1] == ("X-Goflux-Caf\u00e9", "x")


async def test_a_jetstream_handler_gets_the_header_block_unread(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    """The pull engine hands the block on as received: read only where asked for."""
    got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

    async def handle(msg: Message[Order]) -> None:
        got.set_result(msg)

    async with await jetstream.Subscriber(js, CODEC, stream=STREAM).start("orders.b", handle):
        await raw_hpub(nats_server, "orders.b", [("Tenant", "acme")], CODEC.encode(order(6)))
        msg = await asyncio.wait_for(got, 10)
    assert isinstance(msg._wire, bytes)
    assert msg.wire_headers.multi_items()[0] == ("Tenant", "acme")


async def test_lines_nats_py_drops_as_no_headers_stay_out_of_user_headers(
    received_on: Receive,
) -> None:
    lines = [("X-Goflux-Bad Name", "x"), ("X-Goflux-Tag", "a"), ("X-Goflux-Tag", "b")]
    msg = await received_on(lines)
    assert msg.headers.multi_items() == [("Tag", "a"), ("Tag", "b")]  # publishable as is
    assert msg.wire_headers.get_all("X-Goflux-Bad Name") == ["x"]  # as received


async def test_names_nats_py_drops_or_leaves_empty_are_no_headers_of_a_handler(
    received_on: Receive,
) -> None:
    # \x1c-\x1f are whitespace to str.isspace (nats-py drops such names) but not to
    # str.split; an empty name nats-py keeps, and the lines leave out.
    lines = [("", "empty"), ("X-Goflux-Tag\x1c", "evil"), ("\x1fX-Message-ID", "spoof")]
    msg = await received_on([*lines, ("Tenant", "acme")])
    assert not msg.headers
    assert msg.id is None
    assert msg.wire_headers.multi_items() == [*lines[1:], ("Tenant", "acme")]


async def test_an_empty_header_name_is_left_out_of_the_wire_headers(
    received_on: Receive,
) -> None:
    msg = await received_on([("", "empty"), ("Tenant", "acme")])
    assert msg.wire_headers.multi_items() == [("Tenant", "acme")]


async def test_lines_of_names_nats_py_drops_all_stay_in_the_wire_headers(
    received_on: Receive,
) -> None:
    msg = await received_on([("A\x1c", "1"), ("Bad Name", "x")])
    assert not msg.headers
    assert msg.wire_headers.multi_items() == [("A\x1c", "1"), ("Bad Name", "x")]


async def test_a_first_line_that_does_not_end_as_it_should_is_no_header(
    received_on: Receive,
) -> None:
    # "NATS/1.0\rX-Goflux-Tag: evil\r\n...": nats-py reads past byte 9; the lines skip
    # the whole first line, as before header blocks became plain dicts.
    lines = [("XX-Goflux-Tag", "evil"), ("B", "2")]
    msg = await received_on(lines, first_line=b"NATS/1.0\r")
    assert not msg.headers
    assert msg.wire_headers.multi_items() == [("B", "2")]
