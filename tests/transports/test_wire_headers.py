"""``Message.wire_headers``: every header line as received, from any producer."""

from __future__ import annotations

import asyncio

import nats
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


async def test_jetstream_handler_sees_every_foreign_header_line(
    nats_server: NatsServer, js: JetStreamContext
) -> None:
    got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

    async def handle(msg: Message[Order]) -> None:
        got.set_result(msg)

    subscriber = jetstream.Subscriber(js, CODEC, stream=STREAM)
    async with await subscriber.start("orders.>", handle):
        await raw_hpub(nats_server, "orders.raw", FOREIGN, CODEC.encode(order(1)))
        msg = await asyncio.wait_for(got, 10)
    wire = msg.wire_headers
    assert wire.get_all("Tenant") == ["acme"]
    assert wire.get_all("trace-tag") == ["one", "two"]  # both lines, in wire order
    assert [(n, v) for n, v in wire.multi_items() if not n.startswith("Nats-")] == FOREIGN
    assert "Tenant" not in msg.headers  # goflux user headers stay X-Goflux- only
    assert msg.payload == order(1)


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


async def received_on_core_nats(
    server: NatsServer,
    nc: Client,
    lines: list[tuple[str, str]],
    *,
    first_line: bytes = b"NATS/1.0\r\n",
) -> Message[Order]:
    """What a goflux core NATS handler gets for an order sent with exactly ``lines``."""
    got: asyncio.Future[Message[Order]] = asyncio.get_running_loop().create_future()

    async def handle(msg: Message[Order]) -> None:
        got.set_result(msg)

    async with await gnats.Subscriber(nc, CODEC).start("odd", handle):
        await raw_hpub(server, "odd", lines, CODEC.encode(order(5)), first_line=first_line)
        return await asyncio.wait_for(got, 10)


async def test_lines_nats_py_drops_as_no_headers_stay_out_of_user_headers(
    nats_server: NatsServer, nc: Client
) -> None:
    lines = [("X-Goflux-Bad Name", "x"), ("X-Goflux-Tag", "a"), ("X-Goflux-Tag", "b")]
    msg = await received_on_core_nats(nats_server, nc, lines)
    assert msg.headers.multi_items() == [("Tag", "a"), ("Tag", "b")]  # publishable as is
    assert msg.wire_headers.get_all("X-Goflux-Bad Name") == ["x"]  # as received


async def test_names_nats_py_drops_or_leaves_empty_are_no_headers_of_a_handler(
    nats_server: NatsServer, nc: Client
) -> None:
    # \x1c-\x1f are whitespace to str.isspace (nats-py drops such names) but not to
    # str.split; an empty name nats-py keeps, and the lines leave out.
    lines = [("", "empty"), ("X-Goflux-Tag\x1c", "evil"), ("\x1fX-Message-ID", "spoof")]
    msg = await received_on_core_nats(nats_server, nc, [*lines, ("Tenant", "acme")])
    assert not msg.headers
    assert msg.id is None
    assert msg.wire_headers.multi_items() == [*lines[1:], ("Tenant", "acme")]


async def test_an_empty_header_name_is_left_out_of_the_wire_headers(
    nats_server: NatsServer, nc: Client
) -> None:
    msg = await received_on_core_nats(nats_server, nc, [("", "empty"), ("Tenant", "acme")])
    assert msg.wire_headers.multi_items() == [("Tenant", "acme")]


async def test_lines_of_names_nats_py_drops_all_stay_in_the_wire_headers(
    nats_server: NatsServer, nc: Client
) -> None:
    msg = await received_on_core_nats(nats_server, nc, [("A\x1c", "1"), ("Bad Name", "x")])
    assert not msg.headers
    assert msg.wire_headers.multi_items() == [("A\x1c", "1"), ("Bad Name", "x")]


async def test_a_first_line_that_does_not_end_as_it_should_is_no_header(
    nats_server: NatsServer, nc: Client
) -> None:
    # "NATS/1.0\rX-Goflux-Tag: evil\r\n...": nats-py reads past byte 9; the lines skip
    # the whole first line, as before header blocks became plain dicts.
    lines = [("XX-Goflux-Tag", "evil"), ("B", "2")]
    msg = await received_on_core_nats(nats_server, nc, lines, first_line=b"NATS/1.0\r")
    assert not msg.headers
    assert msg.wire_headers.multi_items() == [("B", "2")]
