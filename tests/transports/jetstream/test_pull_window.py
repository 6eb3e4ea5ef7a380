"""The pull window fitted to the messages' size and the handlers' pace, on a real server.

Within ``max_in_flight``, a subscription asks for about a second of its handlers' work
and a few MiB of messages: a slow handler or large messages no longer take hundreds
of messages off the consumer at once.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from goflux import BytesCodec, JsonCodec, Message
from goflux.transports import jetstream
from goflux.transports.jetstream._window import BYTE_BUDGET, FIRST, LEAD, PullWindow
from tests.conftest import STREAM
from tests.helpers import Inbox
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def ack_pending(js: JetStreamContext, consumer: str) -> int:
    """Messages the server has delivered to ``consumer`` and not seen settled."""
    await js._nc.flush()  # (the acks sent so far are at the server)
    info = await js.consumer_info(STREAM, consumer)
    return info.num_ack_pending or 0


def test_the_window_covers_the_pace_and_size_within_its_ceiling() -> None:
    window = PullWindow(512, 512, 2)
    assert (window.size, window.threshold) == (FIRST, FIRST // 4)  # pace unknown yet
    window.paced(0.00002)  # fast handlers: the ceiling
    assert window.size == 512
    window.paced(0.2)  # smoothed: (0.00002 + 0.2) / 2 per message, two workers
    assert window.size == int(2 * LEAD / ((0.00002 + 0.2) / 2))
    window.paced(100.0)  # never fewer than two messages per worker
    assert window.size == 4
    window.paced(0.0001)
    window.paced(0.0001)
    window.paced(0.0001)
    window.sized(10, 10 * 1024 * 1024)  # 1 MiB messages
    assert window.size == BYTE_BUDGET // (1024 * 1024)
    window.lower_ceiling(3)
    assert (window.size, window.threshold) == (3, 1)
    assert window.ceiling == 3


@pytest.mark.parametrize(("acked", "share"), [(True, 4), (False, 2)])
def test_large_messages_not_acked_are_asked_for_once_half_the_window_is_free(
    acked: bool, share: int
) -> None:
    window = PullWindow(512, 512, 1, acked=acked)
    window.paced(0.0001)  # fast handlers: the ceiling holds the window
    assert (window.size, window.threshold) == (512, 512 // 4)
    window.sized(10, 10 * 64 * 1024)  # 64 KiB messages: their size holds it
    assert window.size == BYTE_BUDGET // (64 * 1024)
    assert window.threshold == window.size // share


@pytest.mark.parametrize("ordered", [True, False])
async def test_an_ordered_subscription_pulls_large_messages_half_a_window_at_a_time(
    js: JetStreamContext, ordered: bool
) -> None:
    # 400 messages of 64 KiB: the window holds 64 (BYTE_BUDGET). Room frees one message
    # at a time as each is handled (no acks): a pull of 16 every 16 messages was slower
    # than one of 32 every 32. Acked messages keep the quarter. The pull requests are
    # read off the server's subject by a subscription of the test's own.
    window = BYTE_BUDGET // (64 * 1024)
    batches: list[int] = []

    async def sniffed(msg: Msg) -> None:
        batches.append(json.loads(msg.data)["batch"])

    sniffer = await js._nc.subscribe(f"$JS.API.CONSUMER.MSG.NEXT.{STREAM}.>", cb=sniffed)
    pub = jetstream.Publisher(js, BytesCodec())
    await pub.publish_many(jetstream.Outgoing("orders.a", bytes(64 * 1024)) for _ in range(400))
    handled: Inbox[bytes] = Inbox()
    sub = jetstream.Subscriber(js, BytesCodec(), stream=STREAM, ordered=ordered)
    subscription = await sub.start("orders.>", handled)
    # (The watchdog pulls whatever room is free when nothing is requested, within half
    # a second, however little: stopped, so that only releases send pulls.)
    watchdog = subscription._engine._watchdog
    assert watchdog is not None
    watchdog.cancel()
    await handled.wait_for(400)
    await sub.close()
    await js._nc.flush()  # (every request sent is at the sniffer)
    await sniffer.unsubscribe()
    assert batches[0] == FIRST  # before any message: its size is not known
    if ordered:
        assert min(batches[1:]) >= window // 2, batches
    else:
        assert min(batches[1:]) < window // 2, batches


async def test_the_next_pull_goes_out_once_a_quarter_of_the_window_is_free(
    js: JetStreamContext,
) -> None:
    # max_in_flight 64: the first pull brings 64. The handler returns 16, then holds the
    # 17th: 16 of room are free (a quarter), and a pull for them goes out at once, so
    # the server is never left without a request while 48 still wait here. Once half
    # was free only, it would sit idle, its 64 delivered, until the 32nd returned.
    gate, done = asyncio.Event(), asyncio.Event()
    handled = 0

    async def handle(msg: Message[Order]) -> None:
        nonlocal handled
        handled += 1
        if handled == 17:
            await gate.wait()
        if handled == 200:
            done.set()

    await jetstream.ensure_consumer(js, stream=STREAM, name="quarter", filter_subject="orders.>")
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(200))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="quarter", max_in_flight=64)
    subscription = await sub.start("orders.>", handle)
    # (The watchdog pulls whatever room is free when nothing is requested, within half
    # a second: stopped, so that only the release can send the pull looked for.)
    watchdog = subscription._engine._watchdog
    assert watchdog is not None
    watchdog.cancel()
    delivered = pending = 0
    try:
        # 80 delivered, 64 unsettled (more delivered would leave more unsettled), so
        # 48 queued, the 17th running, 16 new: the bound. (The server may send for the
        # pull before it has applied the 16 acks sent ahead of it: pending may read
        # more for a moment.)
        # (A deadline looked at in the loop, not asyncio.timeout alone: on Python 3.11,
        # nats-py's request may swallow the one cancellation it sends.)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 10
        while delivered < 80 or pending != 64:  # (each look is a round trip)
            assert loop.time() < deadline, f"{delivered} delivered, {pending} unsettled"
            info = await js.consumer_info(STREAM, "quarter", timeout=5)
            delivered, pending = info.delivered.consumer_seq, info.num_ack_pending or 0
    finally:
        gate.set()
    await asyncio.wait_for(done.wait(), 10)  # (and the rest is delivered after all)
    await sub.close()


@pytest.mark.slow  # a timed handler
async def test_a_slow_handler_gets_about_a_second_of_work_ahead(js: JetStreamContext) -> None:
    # 5 ms a message: once the first one is timed, the window is about 200 messages
    # (more than the first pull's 64), where max_in_flight (512) would take all 300
    # stored orders at once.
    handled: Inbox[Order] = Inbox()

    async def slow(msg: Message[Order]) -> None:
        await asyncio.sleep(0.005)  # the handler's work
        await handled(msg)

    await jetstream.ensure_consumer(js, stream=STREAM, name="paced", filter_subject="orders.>")
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(300))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="paced")
    await sub.start("orders.>", slow)
    seen = []
    for count in (10, 40, 80):
        await handled.wait_for(count)
        seen.append(await ack_pending(js, "paced"))
    await sub.close()
    assert FIRST < max(seen) <= int(LEAD / 0.005), seen


async def test_a_slow_first_message_does_not_keep_the_window_small(
    js: JetStreamContext,
) -> None:
    # A cold start: the first message takes 0.3 s, the rest none. The window shrinks
    # to its floor, and is widened again from the next messages' pace: it times the
    # first message after each wake while the pace holds it small (not every 64th
    # only, which took about 450 messages to reach 64 again).
    handled = 0
    sizes: dict[int, int] = {}
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        nonlocal handled
        if handled == 0:
            await asyncio.sleep(0.3)
        handled += 1
        sizes[handled] = subscription._engine.window.size
        if handled == 300:
            done.set()

    await jetstream.ensure_consumer(js, stream=STREAM, name="cold", filter_subject="orders.>")
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(300))
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="cold")
    subscription = await sub.start("orders.>", handle)
    await asyncio.wait_for(done.wait(), 30)
    await sub.close()
    assert sizes[2] <= 4  # the slow first message (timed once it returned) shrank it
    assert max(sizes[n] for n in range(2, 150)) >= FIRST, sizes


@pytest.mark.slow  # 30 MB
@pytest.mark.parametrize("size", [256 * 1024])
async def test_large_messages_are_asked_for_a_few_mib_at_a_time(
    js: JetStreamContext, size: int
) -> None:
    # The first pull asks for 64 (their size unknown yet); from the first message on,
    # the pulls keep at most BYTE_BUDGET of them outstanding: 16 of 256 KiB.
    release = asyncio.Event()
    handled: Inbox[bytes] = Inbox()

    async def handle(msg: Message[bytes]) -> None:
        await handled(msg)
        if len(handled.messages) == FIRST + 6:
            await release.wait()  # holds here: what is pending at the server now?

    await jetstream.ensure_consumer(js, stream=STREAM, name="sized", filter_subject="orders.>")
    pub = jetstream.Publisher(js, BytesCodec())
    await pub.publish_many(jetstream.Outgoing("orders.a", bytes(size)) for _ in range(120))
    sub = jetstream.Subscriber(js, BytesCodec(), stream=STREAM, consumer="sized")
    await sub.start("orders.>", handle)
    await handled.wait_for(FIRST + 6)
    pending = await ack_pending(js, "sized")
    release.set()
    await handled.wait_for(120)
    await sub.close()
    assert 1 <= pending <= BYTE_BUDGET // size, pending


async def test_a_message_stream_is_not_paced_by_its_hand_off(js: JetStreamContext) -> None:
    # A stream's hand-off waits on the stream's consumer (back-pressure, which may
    # settle in batches), not on a handler: its window is max_in_flight from the start,
    # where a handler whose pace is unknown yet gets 64.
    pub = jetstream.Publisher(js, CODEC)
    await pub.publish_many(jetstream.Outgoing("orders.a", order(n)) for n in range(300))
    await jetstream.ensure_consumer(js, stream=STREAM, name="streamed", filter_subject="orders.>")
    sub = jetstream.Subscriber(js, CODEC, stream=STREAM, consumer="streamed")
    async with sub.stream("orders.>", buffer=1) as stream:
        first = await anext(aiter(stream))  # the rest waits, held by the subscription
        async with asyncio.timeout(10):
            while await ack_pending(js, "streamed") < 300:
                pass  # (each look is a round trip to the server)
        await first.ack()
        await stream.stop()
