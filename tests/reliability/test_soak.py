"""A soak under chaos: publisher -> pipe -> output on R3 streams, nodes killed, one reload.

A publisher with message IDs (``retry_publish``) feeds an R3 input stream; a pipe with
derived IDs (``pipe_map``, ``message_id=<input ID>:out``) on a durable consumer writes
each message to an R3 output stream. Meanwhile the leader of the pipe's consumer, of
the input stream and of the output stream are SIGKILLed in turn, each restarted once
the pipeline has moved on without it, and one node reloads a changed configuration
(SIGHUP). At the end every input ID must be in the output stream exactly once.

The short soak (3 kills) runs in the full suite. ``GOFLUX_SOAK_SECONDS=300`` runs the
same soak for that long, killing a node every few seconds::

    GOFLUX_SOAK_SECONDS=300 pytest tests/reliability/test_soak.py -rA
"""

from __future__ import annotations

import asyncio
import itertools
import os
import statistics
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import nats.errors
import nats.js.errors
import pytest
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from goflux import (
    HeadersLike,
    JsonCodec,
    Message,
    Publisher,
    PublishError,
    PublishReceipt,
    SubscribeError,
    pipe_map,
)
from goflux.middleware import ExponentialBackoff, WrappingPublisher, retry_publish
from goflux.testing import NatsCluster
from goflux.transports import jetstream
from tests.helpers import drained
from tests.models import Order, order
from tests.reliability.conftest import Clock, Connection

SOAK_SECONDS = float(os.environ.get("GOFLUX_SOAK_SECONDS") or 0)
"""How long the long soak kills nodes; 0 (unset): the short soak, SHORT_KILLS kills."""
SHORT_KILLS = 3
RELOAD_AFTER = 2  # the one configuration reload follows this many kills
MAX_MESSAGES = 5_000_000 if SOAK_SECONDS else 200_000  # the count bound
BACKLOG = 5_000  # publishers wait while this many published messages are not forwarded
PUBLISHERS = 8  # concurrent publishes
STEADY = 300  # messages forwarded with every node up before the next kill
DOWN = 300  # messages forwarded with the killed node down before it restarts
STALL = 60.0  # seconds without the awaited progress that fail the soak
ACK_WAIT = 4.0  # the pipe consumer's: lost acks come back this soon

# Marked reliability by its folder (tests/conftest.py); slow: half a minute by design.
pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(SOAK_SECONDS * 1.5 + 240 if SOAK_SECONDS else 120),
]

CODEC = JsonCodec(Order)
IN_STREAM, OUT_STREAM, PIPE = "SOAK_IN", "SOAK_OUT", "soak-pipe"
# Whose leader each kill takes down, in turn.
ROLES = (("consumer", PIPE), ("stream", IN_STREAM), ("stream", OUT_STREAM))
# The changed setting of the reload (the default is 65,536).
RELOADED_SETTING = "max_connections: 4096"
LEADERLESS = (
    nats.js.errors.ServiceUnavailableError,
    nats.errors.TimeoutError,
    nats.errors.NoRespondersError,
)


def input_id(n: int) -> str:
    return f"in-{n}"


def output_id(message: Message[Order]) -> str | None:
    """The pipe's derived ID: the same for every delivery of one input message."""
    return None if message.id is None else f"{message.id}:out"


def doubled(message: Message[Order]) -> Order:
    return message.payload.model_copy(update={"amount": message.payload.amount * 2})


@dataclass
class Kill:
    node: int
    role: str
    at: float
    restarted_at: float = 0.0


@dataclass
class Progress:
    """What the publishers and the pipe did, with times; wakes whoever waits on it."""

    clock: Clock
    acked: list[float] = field(default_factory=list)  # times of PubAcks on the input
    waits: list[tuple[float, float]] = field(default_factory=list)  # (sent, acked) per publish
    forwarded: list[float] = field(default_factory=list)  # times of forwards (every delivery)
    forwarded_ids: set[str] = field(default_factory=set)
    redelivered: int = 0  # forwards of a delivery that was not the first
    failed: list[str] = field(default_factory=list)  # publishes that failed for good
    forwarding: int = 0  # handlers running now
    failed_attempts: int = 0  # the pipe's publish attempts that failed (and were retried)
    publishing_done: bool = False
    max_backlog: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def ack(self, sent: float) -> None:
        now = self.clock()
        self.acked.append(now)
        self.waits.append((sent, now))
        self.max_backlog = max(self.max_backlog, self.backlog)
        self.changed.set()

    def forward(self, message: Message[Order]) -> None:
        assert message.id is not None
        self.forwarded.append(self.clock())
        self.forwarded_ids.add(message.id)
        if message.delivery is not None and message.delivery.num_delivered > 1:
            self.redelivered += 1
        self.changed.set()

    @property
    def backlog(self) -> int:
        return len(self.acked) - len(self.forwarded_ids)

    async def until(self, condition: Callable[[], bool], what: str) -> None:
        """Wait until ``condition`` holds; fail the soak after STALL seconds without it."""
        try:
            async with asyncio.timeout(STALL):
                while not condition():
                    self.changed.clear()
                    await self.changed.wait()
        except TimeoutError:
            raise AssertionError(
                f"no progress for {STALL}s waiting for {what}: {len(self.acked)} acked, "
                f"{len(self.forwarded_ids)} forwarded, {len(self.failed)} failed"
            ) from None

    async def attempt_failing_or_forwarded(self, count: int, what: str) -> None:
        """Wait until a publish attempt of the pipe failed, or ``count`` more forwards.

        A pipe whose consumer lost its leader too forwards nothing until both have a
        new leader: then no attempt fails.
        """
        failures = self.failed_attempts
        goal = len(self.forwarded_ids) + count
        await self.until(
            lambda: self.failed_attempts > failures or len(self.forwarded_ids) >= goal, what
        )

    async def forwarded_more(self, count: int, what: str) -> None:
        """Wait until ``count`` more messages were forwarded (or everything was)."""
        goal = len(self.forwarded_ids) + count

        def reached() -> bool:
            everything = self.publishing_done and self.backlog == 0
            return len(self.forwarded_ids) >= goal or everything

        await self.until(reached, what)


class CountingFailures(WrappingPublisher[Order]):
    """Counts the publish attempts that fail (inside ``retry_publish``, which retries them)."""

    def __init__(self, inner: Publisher[Order], progress: Progress) -> None:
        super().__init__(inner)
        self.progress = progress

    async def publish(
        self,
        subject: str,
        value: Order,
        /,
        *,
        headers: HeadersLike | None = None,
        message_id: str | None = None,
    ) -> PublishReceipt | None:
        try:
            return await super().publish(subject, value, headers=headers, message_id=message_id)
        except PublishError:
            self.progress.failed_attempts += 1
            self.progress.changed.set()
            raise


def longest_gap(times: list[float], start: float, end: float) -> float:
    """The longest time in [start, end] without an event of ``times`` (sorted)."""
    inside = [t for t in times if start <= t <= end]
    edges = [start, *inside, end]
    return max(b - a for a, b in itertools.pairwise(edges))


@dataclass(frozen=True)
class Stored:
    """One stored message: its IDs, and the input it came from (read from its payload)."""

    nats_id: str  # Nats-Msg-Id, what JetStream de-duplicates on
    goflux_id: str  # X-Message-ID, the ID handlers see
    origin: str  # the input ID of the order in the payload


async def stored(js: JetStreamContext, stream: str, subjects: str) -> list[Stored]:
    """Every message ``stream`` stores, in stream order.

    Read through an ephemeral consumer without acks, in batches (one request per
    message would take minutes for a long soak).
    """
    total = (await js.stream_info(stream)).state.messages
    config = ConsumerConfig(
        ack_policy=AckPolicy.NONE,
        deliver_policy=DeliverPolicy.ALL,
        inactive_threshold=60,
        num_replicas=1,
        mem_storage=True,
    )
    sub = await js.pull_subscribe(subjects, stream=stream, config=config)
    messages: list[Stored] = []
    try:
        while len(messages) < total:
            try:
                batch = await sub.fetch(min(total - len(messages), 1000), timeout=10)
            except (nats.js.errors.ServiceUnavailableError, nats.errors.NoRespondersError):
                # The new consumer's interest has not reached our node yet (503, no
                # responders): nothing was delivered; ask again after a round trip.
                await js._nc.flush()
                continue
            for msg in batch:
                headers = msg.headers or {}
                order_id = CODEC.decode(msg.data).id  # "o-<n>", published as input_id(n)
                messages.append(
                    Stored(
                        headers.get("Nats-Msg-Id", ""),
                        headers.get("X-Message-ID", ""),
                        input_id(int(order_id.removeprefix("o-"))),
                    )
                )
    finally:
        await sub.unsubscribe()
    return messages


async def leader_of(js: JetStreamContext, cluster: NatsCluster, kind: str, name: str) -> int:
    """The index of the node leading stream ``name`` (or the pipe consumer ``name``)."""
    async with asyncio.timeout(STALL):
        while True:
            try:
                if kind == "stream":
                    info: Any = await js.stream_info(name)
                else:
                    info = await js.consumer_info(IN_STREAM, name)
            except LEADERLESS:
                info = None  # an election: ask again
            if info is not None and info.cluster is not None and info.cluster.leader:
                return cluster.index_of(info.cluster.leader)
            await js._nc.flush()  # a round trip before asking again


async def test_a_pipe_forwards_every_message_exactly_once_through_kills_and_a_reload(
    record: Callable[..., Any],
) -> None:
    connections = [Connection() for _ in range(3)]  # observer, producer, pipe process
    observer, producer, piper = connections
    clock = Clock()
    progress = Progress(clock)
    kills: list[Kill] = []
    reloaded: list[int] = []
    pipe_restarts: list[int] = []  # handlers each restart of the pipe cancelled
    async with NatsCluster(3) as cluster:
        try:
            nc = await observer.connect(cluster.urls)
            js = nc.jetstream()
            admin = nc.jetstream(timeout=NatsCluster.PROVISION_TIMEOUT)  # see its docstring
            # The duplicate window covers the whole run: a late redelivery is still
            # recognised by its derived ID.
            window = max(SOAK_SECONDS, 60.0) + 300.0
            for stream, subjects in ((IN_STREAM, "soak.in.>"), (OUT_STREAM, "soak.out.>")):
                await jetstream.ensure_stream(
                    admin,
                    name=stream,
                    subjects=[subjects],
                    num_replicas=3,
                    duplicate_window=window,
                )
                await cluster.wait_for_stream(nc, stream)
            await jetstream.ensure_consumer(
                admin,
                stream=IN_STREAM,
                name=PIPE,
                filter_subject="soak.in.>",
                ack_wait=ACK_WAIT,
                max_ack_pending=64,
            )
            await cluster.wait_for_stream(nc, IN_STREAM, consumers=[PIPE])

            retrying = retry_publish(
                attempts=100, backoff=ExponentialBackoff(initial=0.05, max=0.5)
            )
            pipe_js = (await piper.connect(cluster.urls)).jetstream()
            counting = CountingFailures(jetstream.Publisher(pipe_js, CODEC, timeout=2), progress)
            forward = pipe_map(
                retrying(counting),
                doubled,
                subject=lambda s: s.replace("soak.in.", "soak.out.", 1),
                message_id=output_id,
            )

            async def handle(message: Message[Order]) -> None:
                progress.forwarding += 1
                progress.changed.set()
                try:
                    await forward(message)
                finally:
                    progress.forwarding -= 1
                progress.forward(message)

            subscriber = jetstream.Subscriber(
                pipe_js,
                CODEC,
                stream=IN_STREAM,
                consumer=PIPE,
                max_in_flight=64,
                concurrency=16,
                expires=5,
                idle_heartbeat=1,  # a pull lost with a consumer leader is renewed in 2 s
            )
            restart_failures: list[SubscribeError] = []

            async def start_pipe() -> jetstream.JetStreamSubscription[Order]:
                """Start the pipe; while its consumer elects a leader, try again.

                Binding reads the consumer's info, which finds no leader during an
                election (a timeout or a 503): a supervisor would start it again.
                """
                async with asyncio.timeout(STALL):
                    while True:
                        try:
                            return await subscriber.start("soak.in.>", handle)
                        except SubscribeError as exc:
                            if not isinstance(exc.__cause__, LEADERLESS):
                                raise
                            restart_failures.append(exc)

            subscriptions = [await start_pipe()]

            publisher = retrying(
                jetstream.Publisher(
                    (await producer.connect(cluster.urls)).jetstream(), CODEC, timeout=2
                )
            )
            numbers = itertools.count()
            stop_publishing = asyncio.Event()

            async def publish() -> None:
                while not stop_publishing.is_set():
                    await progress.until(lambda: progress.backlog < BACKLOG, "the pipe's backlog")
                    n = next(numbers)
                    if n >= MAX_MESSAGES:
                        return
                    sent = clock()
                    try:
                        await publisher.publish(
                            f"soak.in.{n % 16}", order(n), message_id=input_id(n)
                        )
                    except PublishError:
                        progress.failed.append(input_id(n))
                    else:
                        progress.ack(sent)

            async def publish_all() -> None:
                await asyncio.gather(*(publish() for _ in range(PUBLISHERS)))
                progress.publishing_done = True
                progress.changed.set()

            publishing = asyncio.create_task(publish_all())
            roles = itertools.cycle(ROLES)

            def chaos_goes_on() -> bool:
                if progress.publishing_done:
                    return False  # the count bound
                if SOAK_SECONDS:
                    return clock() < SOAK_SECONDS
                return len(kills) < SHORT_KILLS

            while chaos_goes_on():
                # Every replica is current before a kill: each fault meets a whole cluster.
                await cluster.wait_for_stream(nc, IN_STREAM, consumers=[PIPE])
                await cluster.wait_for_stream(nc, OUT_STREAM)
                await progress.forwarded_more(STEADY, "forwards with every node up")
                kind, name = next(roles)
                node = await leader_of(js, cluster, kind, name)
                restart_pipe = name == OUT_STREAM and not pipe_restarts
                cluster.kill(node)
                kill = Kill(node, f"{kind} {name}", clock())
                kills.append(kill)
                print(f"{kill.at:.1f}s: killed n{node}, leader of {kind} {name}")
                if restart_pipe:
                    # The pipe is redeployed while its output has no leader (as a rule):
                    # the drain cancels the forwards stuck in retries and naks them.
                    await progress.attempt_failing_or_forwarded(
                        DOWN, "a forward retried on the lost leader"
                    )
                    stopping = subscriptions[-1]
                    failed_before = stopping.failed
                    print(f"{clock():.1f}s: restarting the pipe")
                    await stopping.stop(timeout=0)
                    pipe_restarts.append(stopping.failed - failed_before)
                    subscriptions.append(await start_pipe())
                await progress.forwarded_more(DOWN, f"forwards with n{node} down")
                await cluster.restart(node)
                kill.restarted_at = clock()
                print(f"{kill.restarted_at:.1f}s: n{node} rejoined")
                if len(kills) == RELOAD_AFTER:
                    target = (node + 1) % len(cluster.nodes)
                    await cluster.reload(target, RELOADED_SETTING)
                    print(f"{clock():.1f}s: n{target} reloaded {RELOADED_SETTING!r}")
                    reloaded.append(target)
                    await progress.forwarded_more(STEADY, "forwards after the reload")
            chaos_ended = clock()

            stop_publishing.set()
            await publishing
            published_for = progress.acked[-1] - progress.acked[0] if progress.acked else 0.0
            async with asyncio.timeout(STALL):
                # Everything delivered and acked (the pipe acks after forwarding). Acks
                # lost with a consumer leader come back after ACK_WAIT: this waits them out.
                await drained(js, IN_STREAM, PIPE)
            await subscriptions[-1].stop()
            handled = sum(subscription.handled for subscription in subscriptions)

            await cluster.wait_for_stream(nc, IN_STREAM)
            await cluster.wait_for_stream(nc, OUT_STREAM)
            inputs = await stored(js, IN_STREAM, "soak.in.>")
            outputs = await stored(js, OUT_STREAM, "soak.out.>")
        finally:
            for connection in connections:
                await connection.close()

    acked_ids = sorted(input_id(n) for n in range(len(progress.acked) + len(progress.failed)))
    input_ids = [message.nats_id for message in inputs]
    # Each input's share of the output, counted by payload: a forward stored twice
    # under different IDs counts twice.
    output_counts = Counter(message.origin for message in outputs)
    twice = sorted(origin for origin, count in output_counts.items() if count > 1)
    missing = sorted(set(input_ids) - set(output_counts))
    unexpected = sorted(set(output_counts) - set(input_ids))
    misnamed = [m for m in outputs if not m.nats_id == m.goflux_id == f"{m.origin}:out"]
    forwarded_for = progress.forwarded[-1] - progress.forwarded[0] if progress.forwarded else 0.0
    down = [
        (kill, kills[i + 1].at if i + 1 < len(kills) else chaos_ended)
        for i, kill in enumerate(kills)
    ]
    # A publisher's recovery: its longest publish (retries included) after a kill. The
    # time between acks would count the time publishers wait on the pipe's backlog too.
    publish_waits = [
        max((a - s for s, a in progress.waits if s <= end and a >= kill.at), default=0.0)
        for kill, end in down
    ]
    intervals = [b.at - a.at for a, b in itertools.pairwise(kills)]
    pipe_gaps = [longest_gap(progress.forwarded, kill.at, end) for kill, end in down]
    facts: dict[str, Any] = {
        "seconds": round(clock(), 1),
        "input": len(inputs),
        "output": len(outputs),
        "distinct": len(output_counts),
        "duplicates": sum(c - 1 for c in output_counts.values() if c > 1),
        "missing": len(missing),
        "unexpected": len(unexpected),
        "publish_failures": len(progress.failed),
        "kills_survived": len(kills),
        "killed": " ".join(f"n{k.node}({k.role})" for k in kills),
        "mean_kill_interval_s": round(statistics.mean(intervals), 1) if intervals else 0.0,
        "mean_down_s": round(statistics.mean(k.restarted_at - k.at for k in kills), 1),
        "reloaded": " ".join(f"n{r}" for r in reloaded),
        "pipe_restart_cancelled": " ".join(str(c) for c in pipe_restarts),
        "pipe_start_retries": len(restart_failures),
        "publish_rate_per_s": round(len(progress.acked) / max(published_for, 1e-9)),
        "consume_rate_per_s": round(len(progress.forwarded) / max(forwarded_for, 1e-9)),
        "max_publish_wait_s": round(max(publish_waits, default=0.0), 2),
        "max_pipe_gap_s": round(max(pipe_gaps, default=0.0), 2),
        "median_pipe_gap_s": round(statistics.median(pipe_gaps), 2) if pipe_gaps else 0.0,
        "max_backlog": progress.max_backlog,
        "forwards": len(progress.forwarded),
        "forward_attempts_failed": progress.failed_attempts,
        "forwarded_twice": len(progress.forwarded) - len(progress.forwarded_ids),
        "handled": handled,
        "redeliveries": progress.redelivered,
    }
    record(**facts)
    print("soak:", ", ".join(f"{k}={v}" for k, v in facts.items()))

    assert len(kills) == SHORT_KILLS or (SOAK_SECONDS and kills)
    assert reloaded
    assert pipe_restarts
    assert not progress.failed
    # The input stream holds every acknowledged publish once (IDs de-duplicated).
    assert sorted(input_ids) == acked_ids
    # The output holds every input exactly once: none twice, none lost, nothing else.
    assert not twice, f"{len(twice)} inputs are in the output more than once: {twice[:10]}"
    assert not missing, f"{len(missing)} inputs are missing from the output: {missing[:10]}"
    assert not unexpected, f"the output holds messages of no input: {unexpected[:10]}"
    # Under the pipe's derived ID, the one JetStream de-duplicated on.
    assert not misnamed, f"{len(misnamed)} outputs lack the derived ID: {misnamed[:3]}"
    # And each was forwarded by a handler that returned before its message was acked.
    unforwarded = sorted(set(input_ids) - progress.forwarded_ids)
    assert not unforwarded, f"{len(unforwarded)} inputs acked, never forwarded: {unforwarded[:10]}"
