"""JetStream: goflux publisher and subscriber against raw nats-py (and FastStream).

Raw nats-py gets its best paths: ``await js.publish`` for sequential publishing,
``publish_async`` for pipelined publishing, and for consuming a callback subscription
driven by hand-sent pull requests (two of 100, another at half a batch to go:
``bench/pull.py``), next to the documented ``fetch(100)`` loop. Every case encodes or
decodes the same 10-field model and acks every message. A publishing case counts what
the stream stored during it; a consuming case counts the messages its handler got. The
consume table also runs goflux with the usual middleware chain and with OpenTelemetry's
no-op providers, to show what they cost (``bench/telemetry.py`` measures the SDK
recording spans and metrics).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence

import nats
import nats.errors
from nats.js import JetStreamContext
from opentelemetry.metrics import NoOpMeterProvider
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult
from opentelemetry.trace import NoOpTracerProvider

from bench import faststream_cases, harness, pull
from bench.harness import Table, interleave, wait_for
from bench.payload import ADAPTER, ORDER, SIZE, Order
from bench.sizes import Sizes
from goflux import JsonCodec, Message, Telemetry, chain
from goflux.middleware import RetryPolicy, message_context, retry_ack, timeout
from goflux.testing import NatsServer
from goflux.transports import jetstream

STREAM = pull.STREAM
raw_callback_pull = pull.raw_callback_pull  # raw nats-py's consume: one function, every suite
CONSUME_PLAIN = "goflux Subscriber, plain acks"
CONSUME_CONFIRMED = "goflux Subscriber, confirm_acks=True"
FETCH_BATCH = 100
# The resilience chain a production service would use (heartbeats only after 10 s).
RESILIENT = chain(retry_ack(RetryPolicy()), timeout(30), message_context())


class DroppingExporter(SpanExporter):
    """Takes finished spans and drops them: the SDK's full cost without any I/O."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def noop_telemetry() -> Telemetry:
    """OpenTelemetry's no-op providers, configured explicitly."""
    return Telemetry(tracer_provider=NoOpTracerProvider(), meter_provider=NoOpMeterProvider())


def sdk_providers() -> tuple[TracerProvider, MeterProvider]:
    """The SDK: every span recorded and batched for export, every metric aggregated."""
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(BatchSpanProcessor(DroppingExporter()))
    return tracer_provider, MeterProvider(metric_readers=[InMemoryMetricReader()])


def noop_hooks_ns(telemetry: Telemetry, calls: int) -> float:
    """Nanoseconds of the telemetry work a JetStream subscriber does per message.

    With no-op providers that is two checks: whether to open a processing scope
    (``active``) and whether to count the settlement (``record_settlement``). Timed in
    a tight loop, it is the exact cost that throughput runs cannot resolve: two runs
    of identical code differ by more than it.
    """
    attributes = {"goflux.settlement.outcome": "ack"}
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter_ns()
        for _ in range(calls):
            if telemetry.active:
                pass
            telemetry.record_settlement(attributes)
        best = min(best, (time.perf_counter_ns() - start) / calls)
    return best


# ------------------------------------------------------------------ publishing


async def stored_by(js: JetStreamContext, publishing: Awaitable[object]) -> int:
    """Run ``publishing``; return how many messages the stream stored meanwhile."""
    before = (await js.stream_info(STREAM)).state.messages
    await publishing
    return (await js.stream_info(STREAM)).state.messages - before


async def raw_sequential(js: JetStreamContext, count: int) -> None:
    for _ in range(count):
        await js.publish("bench.seq", ADAPTER.dump_json(ORDER))


async def goflux_sequential(pub: jetstream.Publisher[Order], count: int) -> None:
    for _ in range(count):
        await pub.publish("bench.seq", ORDER)


async def raw_pipelined(js: JetStreamContext, count: int) -> None:
    futures = [await js.publish_async("bench.pipe", ADAPTER.dump_json(ORDER)) for _ in range(count)]
    await asyncio.gather(*futures)


async def goflux_pipelined(pub: jetstream.Publisher[Order], count: int, window: int) -> None:
    outgoing = (jetstream.Outgoing("bench.pipe", ORDER) for _ in range(count))
    await pub.publish_many(outgoing, window=window)


# ------------------------------------------------------------------- consuming


async def raw_fetch(js: JetStreamContext, count: int) -> int:
    """nats-py's documented pull path: ``fetch(100)`` in a loop, ``ack()`` each."""
    psub = await js.pull_subscribe("bench.data", stream=STREAM)
    received = 0
    while received < count:
        try:
            batch = await psub.fetch(
                min(FETCH_BATCH, count - received), timeout=min(10.0, harness.PATIENCE)
            )
        except TimeoutError:  # nats-py raises its own or, on some paths, asyncio's
            break  # nothing more came: the count says so
        for msg in batch:
            ADAPTER.validate_json(msg.data)
            await msg.ack()
            received += 1
    consumer = (await psub.consumer_info()).name
    await psub.unsubscribe()
    await js.delete_consumer(STREAM, consumer)  # as every other case leaves none behind
    return received


async def goflux_fetch(js: JetStreamContext, count: int) -> int:
    """goflux's one-shot reads: ``Subscriber.fetch(100)`` in a loop, ``ack()`` each."""
    name = f"bench-fetch-{uuid.uuid4().hex[:8]}"
    await jetstream.ensure_consumer(js, stream=STREAM, name=name, filter_subject="bench.data")
    sub = jetstream.Subscriber(js, JsonCodec(Order), stream=STREAM, consumer=name)
    received = 0
    while received < count:
        batch = await sub.fetch(
            min(FETCH_BATCH, count - received), expires=min(10.0, harness.PATIENCE)
        )
        if not batch:
            break  # nothing more came: the count says so
        for msg in batch:
            await msg.ack()
            received += 1
    await sub.close()
    await js.delete_consumer(STREAM, name)  # as every other case leaves none behind
    return received


async def goflux_consume(
    js: JetStreamContext,
    count: int,
    subject: str = "bench.data",
    *,
    middleware: bool = False,
    telemetry: Telemetry | None = None,
    on_order: Callable[[Order], None] | None = None,
    deliver_policy: str = "all",
    ready: asyncio.Event | None = None,
) -> int:
    received = 0
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        nonlocal received
        if on_order is not None:
            on_order(msg.payload)
        received += 1
        if received == count:
            done.set()

    sub = jetstream.Subscriber(
        js,
        JsonCodec(Order),
        stream=STREAM,
        telemetry=telemetry,
        consumer_config={"deliver_policy": deliver_policy},
    )
    subscription = await sub.start(subject, RESILIENT(handle) if middleware else handle)
    if ready is not None:
        ready.set()
    await wait_for(done, lambda: received)
    await subscription.stop()
    return received


async def goflux_consume_acks(js: JetStreamContext, count: int, *, confirm: bool) -> int:
    """goflux's subscriber, auto-acking with plain or with confirmed acks.

    Returns how many messages it consumed (fewer than ``count`` if the rest never
    came), once the last ack is applied; raises if an ack went unconfirmed.
    """
    state = {"received": 0}
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        state["received"] += 1
        if state["received"] == count:
            done.set()

    sub = jetstream.Subscriber(js, JsonCodec(Order), stream=STREAM, confirm_acks=confirm)
    subscription = await sub.start("bench.data", handle)
    await wait_for(done, lambda: state["received"])
    await subscription.stop()  # with confirm_acks: returns once every ack is confirmed
    if subscription.unconfirmed:
        raise RuntimeError(f"{subscription.unconfirmed} acks were not confirmed")
    return state["received"]


def run(rounds: int, sizes: Sizes) -> tuple[list[Table], float]:
    loop = asyncio.new_event_loop()
    server = NatsServer().start()
    try:
        nc = loop.run_until_complete(nats.connect(server.url))
        js = nc.jetstream(publish_async_max_pending=sizes.window)
        loop.run_until_complete(
            jetstream.ensure_stream(js, name=STREAM, subjects=["bench.>"], storage="file")
        )
        pub = jetstream.Publisher(js, JsonCodec(Order))
        loop.run_until_complete(
            pub.publish_many(
                (jetstream.Outgoing("bench.data", ORDER) for _ in range(sizes.consumed)),
                window=sizes.window,
            )
        )
        noop = noop_telemetry()
        rivals = faststream_cases.Rivals(server.url, STREAM) if faststream_cases.AVAILABLE else None

        def on(make: Callable[[], Awaitable[int]]) -> Callable[[], int]:
            return lambda: loop.run_until_complete(make())

        def stored(make: Callable[[], Awaitable[object]]) -> Callable[[], int]:
            return on(lambda: stored_by(js, make()))

        n = sizes.consumed
        publish_cases = {
            "raw js.publish": stored(lambda: raw_sequential(js, sizes.sequential)),
            "goflux Publisher.publish": stored(lambda: goflux_sequential(pub, sizes.sequential)),
        }
        consume_cases = {
            "raw callback pull + ack": on(lambda: raw_callback_pull(js, n)),
            "raw fetch(100) + ack": on(lambda: raw_fetch(js, n)),
            "goflux Subscriber.fetch(100) + ack": on(lambda: goflux_fetch(js, n)),
            "goflux Subscriber (auto-ack)": on(lambda: goflux_consume(js, n)),
            "goflux + retry_ack, timeout, message_context": on(
                lambda: goflux_consume(js, n, middleware=True)
            ),
            "goflux, no-op telemetry providers": on(lambda: goflux_consume(js, n, telemetry=noop)),
        }
        if rivals is not None:
            publish_cases[faststream_cases.PUBLISH] = stored(
                lambda: rivals.publish("bench.seq", sizes.sequential)
            )
            consume_cases[faststream_cases.PULL] = on(lambda: rivals.consume("bench.data", n, True))
            consume_cases[faststream_cases.PUSH] = on(
                lambda: rivals.consume("bench.data", n, False)
            )
            consume_cases[faststream_cases.PUSH_LOGGING] = on(
                lambda: rivals.consume("bench.data", n, False, logs=True)
            )
        confirm_cases = {
            "raw callback pull + ack": on(lambda: raw_callback_pull(js, n)),
            "raw callback pull + ack_sync()": on(lambda: raw_callback_pull(js, n, confirm=True)),
            CONSUME_PLAIN: on(lambda: goflux_consume_acks(js, n, confirm=False)),
            CONSUME_CONFIRMED: on(lambda: goflux_consume_acks(js, n, confirm=True)),
        }
        rival_note = "" if rivals is not None else faststream_cases.MISSING
        tables = [
            Table(
                "publish",
                f"JetStream publish, waiting for each PubAck ({SIZE}-byte JSON payload)",
                interleave(publish_cases, rounds, expected=sizes.sequential),
                "raw js.publish",
                faststream_cases.PUBLISH,
                rival_note,
            ),
            Table(
                "pipelined",
                f"JetStream pipelined publish ({sizes.window:,} PubAcks in flight)",
                interleave(
                    {
                        "raw publish_async": stored(lambda: raw_pipelined(js, sizes.pipelined)),
                        "goflux publish_many": stored(
                            lambda: goflux_pipelined(pub, sizes.pipelined, sizes.window)
                        ),
                    },
                    rounds,
                    expected=sizes.pipelined,
                ),
                "raw publish_async",
            ),
            Table(
                "consume",
                f"JetStream consume with ack, typed handler ({n:,} messages per round)",
                interleave(consume_cases, rounds, expected=n),
                "raw callback pull + ack",
                faststream_cases.PUSH_LOGGING,
                rival_note
                or "FastStream runs with `logger=None` (its fastest setting) unless the row "
                "says default logging. The vs FastStream column compares with its default "
                "setup, the push subscriber with INFO logging.",
            ),
            Table(
                "confirmed",
                f"JetStream consume, plain vs confirmed acks ({n:,} messages per round)",
                interleave(confirm_cases, rounds, expected=n),
                "raw callback pull + ack",
                note="Confirmed acks wait for the server's reply before the message's "
                "in-flight room is given back (`confirm_acks=True`; nats-py: `ack_sync()`, "
                "which its callbacks await one at a time). goflux keeps the confirmations "
                "of many messages in flight at once; the case returns once every ack is "
                "confirmed.",
            ),
        ]
        loop.run_until_complete(nc.close())
        return tables, noop_hooks_ns(noop, sizes.codec_ops * 10)
    finally:
        server.stop()
        loop.close()
