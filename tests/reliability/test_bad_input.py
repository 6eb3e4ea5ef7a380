"""Hostile input: every case is a clear error of the documented type, and nothing else breaks.

Property tests drive random payloads, subjects and headers through real servers; a bad
message is terminated and dead-lettered exactly once while every good one around it
is handled once, and a refused publish never costs the connection.
"""

from __future__ import annotations

import asyncio
import json
import math
import string
import uuid
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import nats
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from nats.aio.client import Client
from nats.aio.msg import Msg

from goflux import (
    BytesCodec,
    DecodeError,
    EncodeError,
    Headers,
    InvalidHeader,
    InvalidSubject,
    JsonCodec,
    Message,
    NonRetryable,
    PayloadTooLarge,
    PublishError,
)
from goflux._subjects import MAX_SUBJECT_BYTES
from goflux._wire import read_headers
from goflux.middleware import DeadLetter, RetryPolicy, retry_ack
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.helpers import drained
from tests.models import Order, order

pytestmark = pytest.mark.timeout(120)

CODEC = JsonCodec(Order)
GOOD = CODEC.encode(order(1))
EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    derandomize=True,  # the same examples every run: the suite must not flake
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def shared_server() -> Iterator[NatsServer]:
    with NatsServer() as srv:
        yield srv


@pytest.fixture(scope="module")
def loop() -> Iterator[asyncio.AbstractEventLoop]:
    """One loop for a module's examples (hypothesis runs them synchronously)."""
    event_loop = asyncio.new_event_loop()
    yield event_loop
    event_loop.close()


def is_order(data: bytes) -> bool:
    try:
        CODEC.decode(data)
    except DecodeError:
        return False
    return True


BAD_PAYLOADS = st.one_of(
    st.binary(max_size=300),
    st.integers(min_value=1, max_value=len(GOOD) - 1).map(lambda n: GOOD[:n]),  # truncated
    st.sampled_from(
        [
            b'{"id": 5, "customerId": "c", "amount": 1}',  # wrong type
            b'{"id": "x", "customerId": "c", "amount": "lots"}',
            b'{"id": "x", "customerId": "c", "amount": NaN}',
            b'{"id": "x", "customerId": "c", "amount": Infinity}',
            b'{"id": "x", "customerId": "c", "amount": 1e999}',
            b"[" * 5_000 + b"]" * 5_000,  # deep nesting
            b'{"id": "x", "customerId": "c", "amount": 1, "lines": ' + b"[" * 3_000 + b"]" * 3_000,
            b"",
            b"null",
        ]
    ),
).filter(lambda data: not is_order(data))


async def run_mixed(url: str, batch: list[bytes | None]) -> None:
    """Publish ``batch`` raw (None: a good order); check what the subscriber made of it."""
    name = f"BAD{uuid.uuid4().hex[:8]}".upper()
    nc = await nats.connect(url)
    js = nc.jetstream()
    try:
        await jetstream.ensure_stream(js, name=name, subjects=[f"{name}.>"])
        dead_letters = f"{name}.dead"
        raw = nc.jetstream()
        expected_good: list[str] = []
        for index, bad in enumerate(batch):
            if bad is None:
                expected_good.append(f"o-{index}")
            await raw.publish(f"{name}.in", CODEC.encode(order(index)) if bad is None else bad)
        handled: list[str] = []
        settled = asyncio.Event()
        total = len(batch)

        async def handle(msg: Message[Order]) -> None:
            handled.append(msg.payload.id)

        letter_publisher = jetstream.Publisher(js, BytesCodec())
        sub = jetstream.Subscriber(
            js,
            CODEC,
            stream=name,
            dead_letter=DeadLetter(letter_publisher, dead_letters),
        )
        subscription = await sub.start(f"{name}.in", handle)
        async with asyncio.timeout(20):
            while subscription.handled + subscription.undecodable < total:
                await nc.flush()
                await asyncio.sleep(0)
            settled.set()
            info = await drained(js, name, subscription.consumer)
            assert info.num_redelivered == 0
        assert subscription.running
        await subscription.stop()
        letters = (await js.stream_info(name, subjects_filter=dead_letters)).state.subjects or {}
        assert handled == expected_good  # each good one once, in order, none delayed away
        assert subscription.undecodable == total - len(expected_good)
        assert letters.get(dead_letters, 0) == total - len(expected_good)  # once each
    finally:
        await js.delete_stream(name)
        await nc.close()


@EXAMPLES
@given(st.lists(st.one_of(st.none(), BAD_PAYLOADS), min_size=1, max_size=12))
def test_bad_payloads_are_dead_lettered_once_and_good_ones_flow(
    shared_server: NatsServer, loop: asyncio.AbstractEventLoop, batch: list[bytes | None]
) -> None:
    loop.run_until_complete(run_mixed(shared_server.url, batch))


@pytest.fixture(scope="module")
def core(
    shared_server: NatsServer, loop: asyncio.AbstractEventLoop
) -> Iterator[tuple[Client, gnats.Publisher[dict[str, Any]]]]:
    nc = loop.run_until_complete(nats.connect(shared_server.url))
    yield nc, gnats.Publisher(nc, JsonCodec(dict[str, Any]))
    loop.run_until_complete(nc.close())


def survives(nc: Client, loop: asyncio.AbstractEventLoop) -> None:
    """The connection is still up, and a good message sent now still arrives."""

    async def probe() -> None:
        sub = await nc.subscribe("probe.after")
        await nc.publish("probe.after", b"still here")
        msg = await sub.next_msg(timeout=5)
        assert msg.data == b"still here"
        await sub.unsubscribe()

    loop.run_until_complete(probe())
    assert nc.is_connected
    assert nc.stats["reconnects"] == 0


def publishable_subject(subject: str) -> bool:
    """The documented rules, written out again: non-empty tokens split by dots, no
    whitespace, ASCII control character or wildcard, at most ``MAX_SUBJECT_BYTES``."""
    return (
        0 < len(subject.encode()) <= MAX_SUBJECT_BYTES
        and all(subject.split("."))
        and not any(c.isspace() or ord(c) < 0x20 or c in "\x7f*>" for c in subject)
    )


HEADER_NAME_CHARACTERS = frozenset(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")


def sendable_headers(headers: dict[str, str]) -> bool:
    """The documented rules, written out again: RFC 9110 token names; values without
    CR, LF or NUL and without leading or trailing whitespace."""
    return all(
        name
        and set(name) <= HEADER_NAME_CHARACTERS
        and not any(c in "\r\n\x00" for c in value)
        and value == value.strip()
        for name, value in headers.items()
    )


def arrives(
    nc: Client, loop: asyncio.AbstractEventLoop, subject: str, publish: Awaitable[None]
) -> Msg:
    """Publish (``publish``) with a plain nats-py subscription to ``subject`` open; return
    what it received."""

    async def go() -> Msg:
        sub = await nc.subscribe(subject)
        try:
            await nc.flush()  # the server has the subscription before the publish
            await publish
            return await sub.next_msg(timeout=5)
        finally:
            await sub.unsubscribe()

    return loop.run_until_complete(go())


TOKEN = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_characters=".*>\x7f", exclude_categories=("Zs", "Zl", "Zp", "Cc")
    ),
    min_size=1,
    max_size=12,
)
VALID_SUBJECTS = st.lists(TOKEN, min_size=1, max_size=8).map(".".join)


@EXAMPLES
@given(
    st.text(max_size=60)
    | st.text(
        alphabet="abc.XYZ-_09",  # near the length limit, mostly valid subjects
        min_size=MAX_SUBJECT_BYTES - 5,
        max_size=MAX_SUBJECT_BYTES + 900,
    )
    | VALID_SUBJECTS
)
@example("a" * MAX_SUBJECT_BYTES)  # the longest valid subject
@example("a" * (MAX_SUBJECT_BYTES - 1) + "é")  # one byte over, in UTF-8
@example("orders.créées.主题.$sys-1_2:3/4")
def test_any_subject_is_published_or_refused_and_the_connection_lives(
    core: tuple[Client, gnats.Publisher[dict[str, Any]]],
    loop: asyncio.AbstractEventLoop,
    subject: str,
) -> None:
    nc, publisher = core
    if publishable_subject(subject):
        msg = arrives(nc, loop, subject, publisher.publish(subject, {"n": 1}))
        assert (msg.subject, json.loads(msg.data)) == (subject, {"n": 1})
    else:
        with pytest.raises(InvalidSubject):
            loop.run_until_complete(publisher.publish(subject, {"n": 1}))
    survives(nc, loop)


HEADER_NAMES = st.text(alphabet=sorted(HEADER_NAME_CHARACTERS), min_size=1, max_size=20)
HEADER_VALUES = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\r\n\x00"), max_size=200
).map(str.strip)


def distinct_names(headers: dict[str, str]) -> bool:
    """No two names differ only by case (they would merge into one repeated header)."""
    return len({name.lower() for name in headers}) == len(headers)


@EXAMPLES
@given(
    st.dictionaries(st.text(max_size=20), st.text(max_size=200), max_size=30).filter(distinct_names)
    | st.dictionaries(HEADER_NAMES, HEADER_VALUES, max_size=30).filter(distinct_names)
)
@example({"X-Trace": "a b\tc", "Ünicode-Value": "x"})  # a name outside the token set
@example({"Tenant": "ü-42 主", "k": ""})
def test_any_headers_are_published_or_refused_and_the_connection_lives(
    core: tuple[Client, gnats.Publisher[dict[str, Any]]],
    loop: asyncio.AbstractEventLoop,
    headers: dict[str, str],
) -> None:
    nc, publisher = core
    if sendable_headers(headers):
        msg = arrives(
            nc, loop, "bad.headers", publisher.publish("bad.headers", {"n": 1}, headers=headers)
        )
        received, _ = read_headers(msg.headers)
        assert (received or Headers()) == Headers(headers)  # every one, unchanged
    else:
        with pytest.raises(InvalidHeader):
            loop.run_until_complete(publisher.publish("bad.headers", {"n": 1}, headers=headers))
    survives(nc, loop)


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("X-Evil\r\nInjected", "v"),
        ("ok", "line\r\nInjected: yes"),
        ("ok", "bare\nnewline"),
        ("", "empty name"),
        ("spa ce", "v"),
        ("colon:", "v"),
        ("ok", "  padded  "),  # NATS clients strip these in transit: refused, not changed
        ("ok", "\ttab"),
        ("ok", "next line\u0085"),
        ("ok", "vertical tab\x0b"),
    ],
)
def test_header_injection_is_refused(
    core: tuple[Client, gnats.Publisher[dict[str, Any]]],
    loop: asyncio.AbstractEventLoop,
    name: str,
    value: str,
) -> None:
    nc, publisher = core
    with pytest.raises(InvalidHeader):
        loop.run_until_complete(publisher.publish("bad.headers", {"n": 1}, headers={name: value}))
    survives(nc, loop)


@pytest.mark.parametrize(
    "subject",
    ["", "a..b", ".a", "a.", "a b", "a.*", "a.>", "a.b\tc", "a" * (MAX_SUBJECT_BYTES + 1)],
)
def test_bad_subjects_are_refused_everywhere(
    core: tuple[Client, gnats.Publisher[dict[str, Any]]],
    loop: asyncio.AbstractEventLoop,
    subject: str,
) -> None:
    nc, publisher = core
    with pytest.raises(InvalidSubject):
        loop.run_until_complete(publisher.publish(subject, {"n": 1}))
    subscriber = gnats.Subscriber(nc, JsonCodec(dict[str, Any]))

    async def nothing(msg: Message[dict[str, Any]]) -> None:
        return None

    if subject not in ("a.*", "a.>"):  # wildcards are fine for subscribing
        with pytest.raises(InvalidSubject):
            loop.run_until_complete(subscriber.start(subject, nothing))
    survives(nc, loop)


def test_the_longest_subject_is_delivered(
    core: tuple[Client, gnats.Publisher[dict[str, Any]]], loop: asyncio.AbstractEventLoop
) -> None:
    nc, publisher = core
    subject = ".".join(["t" * 63] * 48)  # 3,071 bytes
    assert len(subject) <= MAX_SUBJECT_BYTES

    async def deliver() -> dict[str, Any]:
        got: asyncio.Queue[Message[dict[str, Any]]] = asyncio.Queue()
        subscription = await gnats.Subscriber(nc, JsonCodec(dict[str, Any])).start(subject, got.put)
        await nc.flush()
        await publisher.publish(subject, {"n": 3})
        async with asyncio.timeout(5):
            message = await got.get()
        await subscription.stop()
        return message.payload

    assert loop.run_until_complete(deliver()) == {"n": 3}
    survives(nc, loop)


def test_too_many_header_bytes_are_a_clear_error_on_both_transports(
    shared_server: NatsServer,
    core: tuple[Client, gnats.Publisher[dict[str, Any]]],
    loop: asyncio.AbstractEventLoop,
) -> None:
    nc, publisher = core
    limit = nc.max_payload
    # Core NATS: headers push a small body over max_payload.
    with pytest.raises(PayloadTooLarge):
        loop.run_until_complete(
            publisher.publish("big.headers", {"n": 1}, headers={"big": "y" * limit})
        )
    survives(nc, loop)
    # JetStream keeps at most 64 KiB of headers: the server's refusal is a clear,
    # permanent PublishError, and the connection lives on.
    js = nc.jetstream()
    loop.run_until_complete(jetstream.ensure_stream(js, name="HDRS", subjects=["hdrs.>"]))
    many = {f"h{n}": "v" * 100 for n in range(700)}  # ~75 KB of headers, under max_payload
    with pytest.raises(PublishError) as refused:
        loop.run_until_complete(
            jetstream.Publisher(js, BytesCodec()).publish("hdrs.a", b"x", headers=many)
        )
    assert refused.value.permanent
    assert "header size exceeds" in str(refused.value)
    survives(nc, loop)


async def test_a_message_whose_dead_letter_can_never_be_stored_is_terminated_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = tmp_path / "small.conf"
    config.write_text("max_payload: 65536\n")
    async with NatsServer(args=["-c", str(config)]) as server:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="SMALL", subjects=["small.>"])
        # Undecodable and so close to max_payload that its dead letter cannot fit.
        await js.publish("small.in", b"x" * (nc.max_payload - 40))
        await js.publish("small.in", CODEC.encode(order(2)))
        handled: asyncio.Queue[Message[Order]] = asyncio.Queue()
        sub = jetstream.Subscriber(
            js,
            CODEC,
            stream="SMALL",
            dead_letter=DeadLetter(jetstream.Publisher(js, BytesCodec()), "small.dead"),
        )
        subscription = await sub.start("small.in", handled.put)
        async with asyncio.timeout(10):
            assert (await handled.get()).payload == order(2)
            await drained(js, "SMALL", subscription.consumer)
        assert subscription.undecodable == 1  # terminated, not redelivered every 5 s
        assert subscription.running
        await subscription.stop()
        dead = (await js.stream_info("SMALL", subjects_filter="small.dead")).state.subjects
        assert not dead
        assert "terminated WITHOUT a dead letter, refused for good" in caplog.text
        await nc.close()


async def test_a_failed_message_whose_dead_letter_is_refused_is_terminated_once(
    shared_server: NatsServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Retry middleware: a letter over JetStream's 64 KiB of headers cannot ever be stored."""
    nc = await nats.connect(shared_server.url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name="FAT", subjects=["fat.>"])
    # Just under 64 KiB of user headers: storable, but not with the letter's metadata.
    fat = {f"X-Goflux-H{n:03d}": "v" * 90 for n in range(610)}
    await js.publish("fat.in", CODEC.encode(order(1)), headers=fat)
    await js.publish("fat.in", CODEC.encode(order(2)))
    attempts: list[str] = []
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        attempts.append(msg.payload.id)
        if msg.payload.id == "o-1":
            raise NonRetryable("bad order")
        done.set()

    policy = RetryPolicy(dead_letter=DeadLetter(jetstream.Publisher(js, BytesCodec()), "fat.dead"))
    sub = jetstream.Subscriber(js, CODEC, stream="FAT")
    subscription = await sub.start("fat.in", retry_ack(policy)(handle))
    async with asyncio.timeout(10):
        await done.wait()
        await drained(js, "FAT", subscription.consumer)
    await subscription.stop()
    assert attempts == ["o-1", "o-2"]  # terminated at once, not kept and retried
    assert not (await js.stream_info("FAT", subjects_filter="fat.dead")).state.subjects
    assert "WITHOUT a dead letter" in caplog.text
    await nc.close()


async def test_the_core_subscriber_skips_bad_payloads_and_keeps_going(
    shared_server: NatsServer,
) -> None:
    nc = await nats.connect(shared_server.url)
    handled: list[str] = []
    done = asyncio.Event()

    async def handle(msg: Message[Order]) -> None:
        handled.append(msg.payload.id)
        if msg.payload.id == "o-8":  # the last good one
            done.set()

    subscription = await gnats.Subscriber(nc, CODEC).start("core.in", handle)
    await nc.flush()
    for n in range(10):
        await nc.publish("core.in", b'{"id": 5' if n % 3 == 0 else CODEC.encode(order(n)))
    async with asyncio.timeout(10):
        await done.wait()
    assert handled == [f"o-{n}" for n in range(10) if n % 3]
    assert subscription.running
    assert subscription.received == 10
    await subscription.stop()
    await nc.close()


def test_payloads_over_max_payload_are_a_publish_error(
    shared_server: NatsServer,
    core: tuple[Client, gnats.Publisher[dict[str, Any]]],
    loop: asyncio.AbstractEventLoop,
) -> None:
    nc, publisher = core
    limit = nc.max_payload
    js = nc.jetstream()
    loop.run_until_complete(jetstream.ensure_stream(js, name="HUGE", subjects=["huge.>"]))
    js_publisher = jetstream.Publisher(js, BytesCodec())
    for publish in (
        lambda: publisher.publish("huge.core", {"blob": "x" * limit}),
        lambda: js_publisher.publish("huge.js", b"x" * (limit + 1)),
        lambda: js_publisher.publish("huge.js", b"x" * (limit - 10), headers={"big": "y" * 100}),
    ):
        with pytest.raises(PayloadTooLarge) as caught:
            loop.run_until_complete(publish())
        assert caught.value.limit == limit
        survives(nc, loop)
    # Just under the limit still goes through, headers included.
    receipt = loop.run_until_complete(js_publisher.publish("huge.js", b"x" * (limit - 200)))
    assert receipt is not None
    many = {f"h{n}": "v" * 10 for n in range(500)}
    assert loop.run_until_complete(js_publisher.publish("huge.js", b"x", headers=many))
    survives(nc, loop)


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf])
def test_non_finite_floats_are_an_encode_error(value: float) -> None:
    with pytest.raises(EncodeError, match="NaN and Infinity"):
        CODEC.encode(Order(id="x", customerId="c", amount=value))


def test_deep_nesting_is_a_decode_error_not_a_crash() -> None:
    deep = b'{"id": "x", "customerId": "c", "amount": 1, "lines": ' + b"[" * 100_000
    with pytest.raises(DecodeError):
        CODEC.decode(deep)
    with pytest.raises(DecodeError):
        JsonCodec(dict[str, Any]).decode(b'{"a": ' * 100_000 + b"1" + b"}" * 100_000)
    assert json.loads(GOOD)  # the good payload really is JSON: the cases above are the bad ones
