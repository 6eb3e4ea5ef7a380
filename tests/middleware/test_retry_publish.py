"""retry_publish(): transport failures retried with one message ID; nothing else retried."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterator

import nats
import pytest
from nats.js import JetStreamContext

from goflux import (
    EncodeError,
    ExpectationFailed,
    Headers,
    JsonCodec,
    PublishError,
    chain_publishers,
)
from goflux.middleware import retry_publish
from goflux.testing import NatsServer
from goflux.transports import channel, jetstream
from tests.conftest import STREAM
from tests.helpers import ScriptedPublisher
from tests.models import Order, order

CODEC = JsonCodec(Order)


async def test_transport_failures_are_retried_with_one_generated_id() -> None:
    inner = ScriptedPublisher(failures=2)
    publisher = retry_publish(attempts=3, backoff=[0.01])(inner)
    pairs: Iterator[tuple[str, str]] = iter([("Tenant", "acme")])  # readable only once
    receipt = await publisher.publish("s", 1, headers=pairs)
    assert receipt is not None
    assert receipt.sequence == 3
    ids = {message_id for *_, message_id in inner.calls}
    assert len(ids) == 1
    assert None not in ids
    assert all(call[2] == Headers({"Tenant": "acme"}) for call in inner.calls)


async def test_the_callers_message_id_is_kept() -> None:
    inner = ScriptedPublisher(failures=1)
    await retry_publish(backoff=[0])(inner).publish("s", 1, message_id="order-1")
    assert [message_id for *_, message_id in inner.calls] == ["order-1", "order-1"]


async def test_the_last_error_is_raised_when_attempts_run_out() -> None:
    inner = ScriptedPublisher(failures=10)
    with pytest.raises(PublishError, match="no PubAck"):
        await retry_publish(attempts=3, backoff=[0])(inner).publish("s", 1)
    assert len(inner.calls) == 3


async def test_permanent_failures_are_not_retried() -> None:
    closed = PublishError("closed", subject="s", permanent=True)
    inner = ScriptedPublisher(failures=10, error=closed)
    with pytest.raises(PublishError, match="closed"):
        await retry_publish(backoff=[0])(inner).publish("s", 1)
    assert len(inner.calls) == 1


async def test_bad_input_and_closed_publishers_fail_at_once() -> None:
    bus = channel.Bus(codec=CODEC)
    publisher = retry_publish(backoff=[0])(channel.Publisher(bus))
    with pytest.raises(EncodeError):
        await publisher.publish("orders.x", "not an order")  # type: ignore[arg-type]
    await publisher.close()  # closes the wrapped publisher too
    with pytest.raises(PublishError, match="closed") as caught:
        await publisher.publish("orders.x", order(1))
    assert caught.value.permanent


async def test_a_rejected_expectation_is_not_retried(js: JetStreamContext) -> None:
    inner = jetstream.Publisher(js, CODEC)
    await inner.publish("orders.a", order(1))
    with pytest.raises(ExpectationFailed):
        await inner.publish("orders.a", order(2), expected_last_message_id="nope")
    error = ExpectationFailed("x", subject="s", expectation="last_sequence")
    unreliable = ScriptedPublisher(failures=10, error=error)
    with pytest.raises(ExpectationFailed):
        await retry_publish(backoff=[0])(unreliable).publish("s", 1)
    assert len(unreliable.calls) == 1


async def test_cancellation_stops_the_retries_at_once() -> None:
    inner = ScriptedPublisher(failures=100)
    task = asyncio.create_task(retry_publish(attempts=100, backoff=[60])(inner).publish("s", 1))
    await asyncio.wait_for(inner.failed_once.wait(), 5)  # now waiting out the 60 s delay
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(inner.calls) == 1


@pytest.mark.parametrize("attempts", [0, -1, True])
def test_attempts_must_be_positive(attempts: int) -> None:
    with pytest.raises(ValueError, match="attempts"):
        retry_publish(attempts=attempts)


class RetrySignal(logging.Handler):
    """Sets an event when retry_publish logs that it retries (a real signal to wait on)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.retried = asyncio.Event()
        self.count = 0
        self.loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if "retrying" in record.getMessage():
            self.count += 1
            self.loop.call_soon_threadsafe(self.retried.set)


@pytest.mark.slow  # a server outage and restart
@pytest.mark.timeout(180)  # above its waits: 30 s for a retry, then 120 s for the producers
async def test_every_message_is_stored_once_across_a_server_restart(
    nats_server: NatsServer,
) -> None:
    signal = RetrySignal()
    middleware_log = logging.getLogger("goflux.middleware")
    middleware_log.addHandler(signal)
    reconnected = asyncio.Event()

    async def on_reconnect() -> None:
        reconnected.set()

    client = await nats.connect(
        nats_server.url, reconnect_time_wait=0.05, max_reconnect_attempts=-1,
        reconnected_cb=on_reconnect,
    )  # fmt: skip
    js = client.jetstream()
    await jetstream.ensure_stream(js, name=STREAM, subjects=["orders.>"])
    publisher = chain_publishers(retry_publish(attempts=30, backoff=[0.05, 0.1, 0.2, 0.5]))(
        jetstream.Publisher(js, CODEC, timeout=0.5)
    )
    workers, per_worker = 8, 60
    halfway = asyncio.Event()
    sent = duplicates = 0

    async def produce(worker: int) -> None:
        nonlocal sent, duplicates
        for n in range(per_worker):
            receipt = await publisher.publish(f"orders.w{worker}", order(worker * per_worker + n))
            sent += 1
            duplicates += receipt is not None and receipt.duplicate
            if sent == workers * per_worker // 2:
                halfway.set()

    producers = [asyncio.create_task(produce(w)) for w in range(workers)]
    try:
        await halfway.wait()
        # An outage mid-stream: publishes in flight fail or lose their PubAck, and the
        # ones sent meanwhile wait in the client's buffer until it reconnects.
        await asyncio.to_thread(nats_server.stop, keep_store=True)
        await asyncio.wait_for(signal.retried.wait(), 30)
        await nats_server.restart()
        await asyncio.wait_for(asyncio.gather(*producers), 120)
    finally:
        middleware_log.removeHandler(signal)
    assert reconnected.is_set()

    info = await js.stream_info(STREAM)
    ids = set()
    for seq in range(1, (info.state.last_seq or 0) + 1):
        stored = await js.get_msg(STREAM, seq)
        assert stored.headers is not None
        ids.add(stored.headers["Nats-Msg-Id"])
    await client.close()
    assert sent == workers * per_worker
    assert info.state.messages == len(ids) == sent  # stored exactly once each
    assert signal.count > 0
    print(f"retries: {signal.count}, de-duplicated retries: {duplicates}")


async def test_a_cancellation_swallowed_below_still_stops_the_retries() -> None:
    """nats-py's wait_for (Python 3.11) may swallow a cancellation and return a failure."""

    class Swallowing(ScriptedPublisher):
        async def publish(self, subject: str, value: object, /, **kwargs: object) -> None:
            self.calls.append((subject, value, None, None))
            task = asyncio.current_task()
            assert task is not None
            task.cancel()  # our caller is cancelled just as the request completes...
            with contextlib.suppress(asyncio.CancelledError):  # ...and the library
                await asyncio.sleep(0)  # swallows it, as wait_for does

            raise PublishError("no responders", subject=subject)

    inner = Swallowing()
    with pytest.raises(asyncio.CancelledError):
        await retry_publish(attempts=5, backoff=[0])(inner).publish("s", 1)
    assert len(inner.calls) == 1
