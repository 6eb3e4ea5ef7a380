"""Static typing checks: mypy must accept every line without a ``type: ignore``.

Lines ending in a type-ignore comment with an error code must produce exactly that
mypy error; the
test ``tests/core/test_typing.py`` strips the comments and checks mypy reports them, and
``mypy --strict`` (warn_unused_ignores) fails if an expected error disappears.
This file is type-checked, never run.
"""

from __future__ import annotations

from types import TracebackType
from typing import Self, TypeVar, assert_type

from nats.aio.client import Client
from pydantic import BaseModel
from pyspark.sql import SparkSession
from pyspark.sql.streaming.readwriter import DataStreamWriter
from typing_extensions import TypedDict

from goflux import (
    BytesCodec,
    Closeable,
    Codec,
    Group,
    Handler,
    HeadersLike,
    JsonCodec,
    Message,
    MessageStream,
    MicroBatches,
    Middleware,
    ProcessStats,
    Publisher,
    PublishReceipt,
    Requester,
    StrCodec,
    Subscriber,
    Topic,
    bind_publisher,
    bind_topic,
    chain,
    chain_publishers,
    codecs,
    message_stream,
    micro_batches,
    pipe,
    pipe_flat_map,
    pipe_map,
    process,
)
from goflux.codecs import CsvCodec, MsgpackCodec, TomlCodec, XmlCodec, YamlCodec
from goflux.middleware import (
    DeadLetter,
    ExponentialBackoff,
    RetryPolicy,
    auto_ack,
    current_message,
    forward_context,
    message_context,
    retry_ack,
    retry_publish,
    timeout,
)
from goflux.transports import channel
from goflux.transports import nats as gnats
from goflux.transports import spark as gspark

T = TypeVar("T")


class Order(BaseModel):
    id: str


class Customer(BaseModel):
    name: str


class Event(TypedDict):
    name: str


# --- codecs infer their payload type -------------------------------------------------
order_codec = JsonCodec(Order)
assert_type(order_codec, JsonCodec[Order])
assert_type(order_codec.decode(b"{}"), Order)
assert_type(JsonCodec(list[int]).decode(b"[]"), list[int])
assert_type(JsonCodec(Event).decode(b"{}"), Event)
assert_type(JsonCodec(int | None), JsonCodec[int | None])
as_codec: Codec[Order] = order_codec
bytes_codec: Codec[bytes] = BytesCodec()
str_codec: Codec[str] = StrCodec()
wrong_codec: Codec[Customer] = order_codec  # type: ignore[assignment]
order_codec.encode(Customer(name="x"))  # type: ignore[arg-type]

# --- byte codecs are Codec[bytes]; a pipe keeps the first codec's type ----------------
gzip_codec: Codec[bytes] = codecs.Gzip(9, max_size=1 << 20)
for byte_codec in (codecs.Flate(), codecs.Zstd(), codecs.Brotli(), codecs.Snappy()):
    assert_type(byte_codec.decode(b""), bytes)
binary: list[Codec[bytes]] = [codecs.Base64("url"), codecs.Base32(), codecs.Hex(), codecs.Ascii85()]
json_gzip = codecs.pipe(JsonCodec(Order), codecs.Gzip())
assert_type(json_gzip, codecs.Pipe[Order])
assert_type(json_gzip.decode(b""), Order)
piped: Codec[Order] = codecs.pipe(order_codec, codecs.Zstd(), codecs.Base64(), codecs.Hex())
assert_type(codecs.pipe(json_gzip, codecs.Base64()), codecs.Pipe[Order])
piped_wrong: Codec[Customer] = json_gzip  # type: ignore[assignment]
json_gzip.encode(Customer(name="x"))  # type: ignore[arg-type]
codecs.pipe(order_codec, StrCodec())  # type: ignore[arg-type]
codecs.pipe(order_codec, order_codec)  # type: ignore[arg-type]
codecs.Base64("hex")  # type: ignore[arg-type]

# --- transports carry the type end to end ---------------------------------------------
bus = channel.Bus(codec=order_codec)
assert_type(bus, channel.Bus[Order])
assert_type(channel.Bus[Order](), channel.Bus[Order])
publisher: Publisher[Order] = channel.Publisher(bus)
subscriber: Subscriber[Order] = channel.Subscriber(bus)


async def on_order(msg: Message[Order]) -> None:
    assert_type(msg.payload, Order)


async def on_customer(msg: Message[Customer]) -> None: ...


async def on_anything(msg: Message[object]) -> None: ...


async def use() -> None:
    receipt = await publisher.publish("orders.new", Order(id="1"), message_id="1")
    assert_type(receipt, PublishReceipt | None)
    await publisher.publish("orders.new", Customer(name="x"))  # type: ignore[arg-type]
    await subscriber.start("orders.*", on_order)
    await subscriber.start("orders.*", on_anything)  # a handler of a supertype is fine
    await subscriber.start("orders.*", on_customer)  # type: ignore[arg-type]


# --- variance ------------------------------------------------------------------------
object_publisher: Publisher[object] = channel.Publisher(channel.Bus[object]())
narrower_publisher: Publisher[Order] = object_publisher  # contravariant: fine
wider_publisher: Publisher[object] = publisher  # type: ignore[assignment]
wider_subscriber: Subscriber[object] = subscriber  # covariant: fine
narrower_subscriber: Subscriber[Order] = channel.Subscriber(channel.Bus[object]())  # type: ignore[assignment]
wider_message: Message[object] = Message("s", Order(id="1"))  # covariant: fine


# --- middleware ----------------------------------------------------------------------
def audit(handler: Handler[Order]) -> Handler[Order]:
    return handler


def passthrough(handler: Handler[T]) -> Handler[T]:
    return handler


order_middleware: Middleware[Order] = audit
generic_middleware: Middleware[Order] = passthrough
composed = chain(audit, passthrough)
assert_type(composed, Middleware[Order])
wrapped: Handler[Order] = composed(on_order)
customer_middleware: Middleware[Customer] = audit  # type: ignore[assignment]


# --- request/reply variance ----------------------------------------------------------
class Lookup:
    """Structurally a Requester[Order, Customer]."""

    async def request(
        self,
        subject: str,
        request: Order,
        /,
        *,
        headers: HeadersLike | None = None,
        timeout: float | None = None,
    ) -> Customer:
        return Customer(name=request.id)

    async def close(self) -> None: ...

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


requester: Requester[Order, Customer] = Lookup()
wider_reply: Requester[Order, object] = Lookup()  # covariant reply: fine
wrong_request: Requester[Customer, Customer] = Lookup()  # type: ignore[assignment]


# --- core NATS request/reply ----------------------------------------------------------
async def request_reply(nc: Client) -> None:
    typed: Requester[Order, Customer] = gnats.Requester(nc, order_codec, JsonCodec(Customer))
    assert_type(await typed.request("q", Order(id="1")), Customer)
    await typed.request("q", Customer(name="x"))  # type: ignore[arg-type]

    async def answer(order: Order) -> Customer:
        return Customer(name=order.id)

    async def wrong_answer(order: Order) -> Order:
        return order

    responder = gnats.Responder(nc, order_codec, JsonCodec(Customer))
    await responder.start("q", answer)
    await responder.start("q", wrong_answer)  # type: ignore[arg-type]


# --- goflux.middleware keeps the payload type ------------------------------------------
policy = RetryPolicy(backoff=ExponentialBackoff(initial=0.5), max_attempts=3)
resilient = chain(retry_ack(policy), timeout(5), message_context(), audit)(on_order)
assert_type(resilient, Handler[Order])
generic_only = chain(auto_ack(), retry_ack())
assert_type(generic_only(on_customer), Handler[Customer])
mixed_types = chain(audit, retry_ack())(on_customer)  # type: ignore[arg-type]
RetryPolicy(backoff="1s")  # type: ignore[arg-type]
timeout("5")  # type: ignore[arg-type]

retrying = chain_publishers(forward_context(), retry_publish(attempts=3))(publisher)
assert_type(retrying, Publisher[Order])
wrong_value = retry_publish()(publisher).publish("s", Customer(name="x"))  # type: ignore[arg-type]
dead_letter = DeadLetter(channel.Publisher(channel.Bus(codec=bytes_codec)), "dlq")
DeadLetter(publisher, "dlq")  # type: ignore[arg-type]
assert_type(current_message(), Message[object] | None)

inline = retry_publish()(channel.Publisher(channel.Bus(codec=order_codec)))
assert_type(inline, Publisher[Order])
as_closeable: Closeable = inline


async def publish_in_block() -> None:
    async with retry_publish()(channel.Publisher(channel.Bus(codec=order_codec))) as entered:
        assert_type(entered, Publisher[Order])


closeables: list[Closeable] = [channel.Publisher(channel.Bus(codec=order_codec))]


# --- composition keeps the payload type ------------------------------------------------
order_bus = channel.Bus(codec=order_codec)
order_sub = channel.Subscriber(order_bus)
order_pub = channel.Publisher(order_bus)
assert_type(order_sub.stream("orders"), MessageStream[Order])
assert_type(message_stream(order_sub, "orders"), MessageStream[Order])
assert_type(micro_batches(order_sub, "orders", max_messages=10, max_wait=1), MicroBatches[Order])
topic = bind_topic(order_pub, order_sub, "orders")
assert_type(topic, Topic[Order])
wrong_bound = bind_publisher(order_pub, "orders").publish(Customer(name="x"))  # type: ignore[arg-type]
bytes_sub = channel.Subscriber(channel.Bus(codec=bytes_codec))
bind_topic(order_pub, bytes_sub, "s")  # type: ignore[misc]


def amount_of(message: Message[Order]) -> float:
    return float(len(message.payload.id))


async def name_of(message: Message[Customer]) -> str:
    return message.payload.name


float_pub = channel.Publisher(channel.Bus(codec=JsonCodec(float)))
str_pub = channel.Publisher(channel.Bus(codec=StrCodec()))
assert_type(pipe_map(float_pub, amount_of, subject="amounts"), Handler[Order])
assert_type(pipe_map(str_pub, name_of, subject="names"), Handler[Customer])
assert_type(pipe(order_pub, subject="copy"), Handler[Order])
pipe_map(str_pub, amount_of, subject="amounts")  # type: ignore[arg-type]


def lines_of(message: Message[Order]) -> list[str]:
    return [message.payload.id]


assert_type(pipe_flat_map(str_pub, lines_of, subject="lines"), Handler[Order])


async def iterated() -> None:
    async for message in order_sub.stream("orders"):
        assert_type(message, Message[Order])
        await message.ack(confirm=True)
    async for batch in micro_batches(order_sub, "orders", max_messages=10, max_wait=1):
        assert_type(batch, list[Message[Order]])
    assert_type(await anext(order_sub.stream("orders")), Message[Order])


async def handled_in_group() -> None:
    stats = await process(order_sub.stream("orders"), on_order, concurrency=4)
    assert_type(stats, ProcessStats)
    group = Group()
    group.subscribe(order_sub, "orders", on_order)
    group.process(order_sub.stream("orders"), on_order)
    group.subscribe(order_sub, "orders", on_customer)  # type: ignore[misc]


# --- Spark adapter: the payload type flows through columns and sinks.
columns = gspark.PayloadColumns(Order)
assert_type(columns.from_row({}), Order)
columns.to_row(Customer(id="c", name="n"))  # type: ignore[arg-type]
assert_type(
    gspark.foreach_batch_publisher(servers="nats://x", subject="o", codec=JsonCodec(Order)),
    gspark.BatchPublisher[Order],
)
gspark.foreach_batch_publisher(servers="nats://x", subject="o", codec=StrCodec())  # type: ignore[arg-type]
# Any codec that states its payload type: the rows become that type.
assert_type(
    gspark.foreach_batch_publisher(
        servers="nats://x", subject="o", codec=codecs.pipe(MsgpackCodec(Order), codecs.Zstd())
    ),
    gspark.BatchPublisher[Order],
)


# --- Spark source: read and read_stream share typed options (ReadOptions).
def spark_reads(spark: SparkSession) -> None:
    gspark.read_stream(spark, Order, servers="nats://x", stream="S", subjects="o.>", user="u")
    gspark.read(spark, Order, servers=["nats://x"], stream="S", ending=10, fetch_size=100)
    gspark.read(spark, Order, servers="nats://x", stream="S", codec=YamlCodec(Order))
    gspark.read_stream(spark, Order, servers="nats://x", stream="S", codec=StrCodec())
    gspark.read(spark, Order, servers="nats://x", stream="S", codec="json")  # type: ignore[arg-type]
    orders = gspark.read(spark, Order, servers="nats://x", stream="S")
    writer = gspark.write_stream(orders, servers="nats://x", subject="o", codec=MsgpackCodec(Order))
    assert_type(writer, DataStreamWriter)
    gspark.read_stream(spark, Order, servers="nats://x", stream="S", fetch_sise=1)  # type: ignore[call-arg]
    gspark.read(spark, Order, servers="nats://x")  # type: ignore[call-arg]
    gspark.read(spark, Order, servers="nats://x", stream="S", starting="first")  # type: ignore[arg-type]


# --- the codecs of goflux.codecs infer their payload type too -------------------------
msgpack_codec = MsgpackCodec(Order)
assert_type(msgpack_codec, MsgpackCodec[Order])
assert_type(msgpack_codec.decode(b""), Order)
assert_type(MsgpackCodec(list[int]).decode(b""), list[int])
assert_type(YamlCodec(Order), YamlCodec[Order])
assert_type(TomlCodec(Event).decode(b""), Event)
assert_type(XmlCodec(Order, root="order"), XmlCodec[Order])
assert_type(CsvCodec(Order), CsvCodec[Order])
assert_type(CsvCodec(Order).decode(b""), list[Order])
msgpack_as_codec: Codec[Order] = msgpack_codec
yaml_as_codec: Codec[Order] = YamlCodec(Order)
toml_as_codec: Codec[Order] = TomlCodec(Order)
xml_as_codec: Codec[Order] = XmlCodec(Order)
csv_as_codec: Codec[list[Order]] = CsvCodec(Order)
csv_wrong: Codec[Order] = CsvCodec(Order)  # type: ignore[assignment]
msgpack_wrong: Codec[Customer] = msgpack_codec  # type: ignore[assignment]
msgpack_codec.encode(Customer(name="x"))  # type: ignore[arg-type]
msgpack_bus = channel.Bus(codec=msgpack_codec)
assert_type(msgpack_bus, channel.Bus[Order])
