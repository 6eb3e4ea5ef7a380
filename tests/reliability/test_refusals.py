"""Server refusals: every "no" from a real nats-server is a clear error at once.

One nats-server runs with a permissions config: an account with JetStream and users
that each lack one permission, and an account without JetStream. Each test does what
a user would, as the user that lacks the permission, and measures the time to the
error (≤ 1 s where the server refuses at once). The config-reload tests rewrite the
config and send SIGHUP.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import nats
import pytest
from nats.aio.client import Client

from goflux import (
    BytesCodec,
    JetStreamUnavailable,
    JsonCodec,
    Message,
    PermissionDenied,
    PublishError,
    RequestTimeout,
    ServiceError,
    SubscribeError,
)
from goflux.middleware import ExponentialBackoff, retry_publish
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.models import Order, order

pytestmark = [pytest.mark.timeout(60)]

CODEC = JsonCodec(Order)
PASSWORD = "pw"
STREAM = "REFUSE"
AT_ONCE = 1.0  # seconds: the server refuses at once, so must goflux

# Users of the APP account, each lacking one permission (NOJS has no JetStream).
USERS = {
    "admin": "",
    "nopub": 'publish: { deny: ["denied.>"] }',
    "nosub": 'subscribe: { deny: ["denied.>"] }',
    "nopull": 'publish: { deny: ["$JS.API.CONSUMER.MSG.NEXT.>"] }',
    "noack": 'publish: { deny: ["$JS.ACK.>"] }',
    "nocreate": 'publish: { deny: ["$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.>"] }',
    "noinfo": 'publish: { deny: ["$JS.API.STREAM.>"] }',
    "noreply": 'publish: { deny: ["_INBOX.>"] }',
    "reloaded": "",  # loses its permissions by a config reload
    "nocreateb": 'publish: { deny: ["$JS.API.CONSUMER.CREATE.OTHER.>", '
    '"$JS.API.CONSUMER.DURABLE.CREATE.OTHER.>"] }',
    "queues": 'subscribe: { allow: ["jobs", "jobs good", "_INBOX.>"] }',
    "cased": 'publish: { deny: ["OK.>"] }, subscribe: { deny: ["Foo"] }',
    "noinbox": 'subscribe: { deny: ["_INBOX.>"] }',
    "nochunks": 'publish: { deny: ["$O.FILES.C.>"] }',
}


def config(
    store: Path, *, revoked: bool = False, max_payload: int = 65536, max_subscriptions: int = 0
) -> str:
    """The server config; ``revoked`` takes every permission from user ``reloaded``."""
    users = []
    for user, allowed in USERS.items():
        permissions = allowed
        if user == "reloaded" and revoked:
            permissions = 'publish: { deny: [">"] }, subscribe: { deny: [">"] }'
        perms = f", permissions: {{ {permissions} }}" if permissions else ""
        users.append(f"{{ user: {user}, password: {PASSWORD}{perms} }}")
    return f"""
listen: 127.0.0.1:-1
max_payload: {max_payload}
max_subscriptions: {max_subscriptions}
jetstream {{ store_dir: "{store}" }}
accounts {{
  APP {{ jetstream: enabled, users: [ {", ".join(users)} ] }}
  NOJS {{ users: [ {{ user: nojs, password: {PASSWORD} }} ] }}
}}
"""


class Server:
    """The permissions server, its config file, and clients by user name."""

    def __init__(self, tmp: Path) -> None:
        self.conf = tmp / "server.conf"
        self.store = tmp / "js"
        self.conf.write_text(config(self.store))
        self.server = NatsServer(jetstream=False, args=["-c", str(self.conf)])
        self.clients: list[Client] = []
        self.errors: list[Exception] = []
        self.error_seen = asyncio.Event()

    async def connect(self, user: str, **options: Any) -> Client:
        async def on_error(exc: Exception) -> None:  # the user's own callback
            self.errors.append(exc)
            self.error_seen.set()

        options.setdefault("error_cb", on_error)
        nc = await nats.connect(self.server.url, user=user, password=PASSWORD, **options)
        self.clients.append(nc)
        return nc

    async def reload(self, **changes: Any) -> None:
        """Rewrite the config and reload it; returns once the server has (its own log)."""
        self.conf.write_text(config(self.store, **changes))
        await self.server.reload()


@pytest.fixture
async def server(tmp_path: Path) -> AsyncIterator[Server]:
    srv = Server(tmp_path)
    async with srv.server:
        admin = await srv.connect("admin")
        await jetstream.ensure_stream(admin.jetstream(), name=STREAM, subjects=["denied.>", "ok.>"])
        await jetstream.ensure_consumer(
            admin.jetstream(), stream=STREAM, name="WORK", filter_subject="ok.>", ack_wait=30
        )
        yield srv
        for nc in srv.clients:
            if not nc.is_closed:
                await nc.close()


async def timed(make: Callable[[], Any]) -> tuple[BaseException, float]:
    """Await ``make()``; return the exception it raised and the seconds it took."""
    began = time.perf_counter()
    with pytest.raises(Exception) as caught:  # noqa: PT011  # the callers check the type
        await make()
    return caught.value, time.perf_counter() - began


async def publish_ok(admin: Client, count: int) -> None:
    pub = jetstream.Publisher(admin.jetstream(), CODEC)
    for n in range(count):
        await pub.publish(f"ok.{n}", order(n), message_id=f"m-{n}")


# ------------------------------------------------------------------ publishing


async def test_a_jetstream_publish_to_a_denied_subject_fails_at_once(server: Server) -> None:
    nc = await server.connect("nopub")
    pub = jetstream.Publisher(nc.jetstream(), CODEC)
    error, took = await timed(lambda: pub.publish("denied.x", order(1)))
    assert isinstance(error, PermissionDenied)
    assert error.permanent
    assert not error.may_be_stored
    assert error.operation == "publish"
    assert error.subject == "denied.x"
    assert took < AT_ONCE
    assert server.errors, "the user's own error callback still runs"


async def test_retry_publish_does_not_retry_a_denied_publish(server: Server) -> None:
    nc = await server.connect("nopub")
    middleware = retry_publish(attempts=5, backoff=ExponentialBackoff(initial=0.5))
    pub = middleware(jetstream.Publisher(nc.jetstream(), CODEC))
    error, took = await timed(lambda: pub.publish("denied.x", order(1)))
    assert isinstance(error, PermissionDenied)
    assert took < AT_ONCE


async def test_publish_many_reports_a_refused_subject_at_once_and_the_rest_stored(
    server: Server,
) -> None:
    nc = await server.connect("nopub")
    pub = jetstream.Publisher(nc.jetstream(), CODEC)
    items = [jetstream.Outgoing("denied.x" if n % 2 else f"ok.{n}", order(n)) for n in range(10)]
    began = time.perf_counter()
    results = await pub.publish_many(items, return_exceptions=True)
    took = time.perf_counter() - began
    denied = [r for r in results if isinstance(r, PermissionDenied)]
    stored = [r for r in results if not isinstance(r, PublishError)]
    assert len(denied) == 5
    assert len(stored) == 5
    assert took < AT_ONCE


async def test_publish_many_reports_the_refusal_of_the_publish_it_waits_for(
    server: Server,
) -> None:
    nc = await server.connect("nopub")
    pub = jetstream.Publisher(nc.jetstream(), CODEC, timeout=5.0)
    for _ in range(20):
        began = time.perf_counter()
        results = await pub.publish_many(
            [jetstream.Outgoing("denied.x", order(1))], return_exceptions=True
        )
        assert isinstance(results[0], PermissionDenied)
        assert time.perf_counter() - began < AT_ONCE
    assert not pub._acks._pending, "refused publishes leave nothing behind"


async def test_publish_many_reads_the_servers_refusal_of_a_full_stream(server: Server) -> None:
    admin = await server.connect("admin")
    js = admin.jetstream()
    await jetstream.ensure_stream(js, name="FULL", subjects=["full.>"], max_msgs=3, discard="new")
    pub = jetstream.Publisher(js, CODEC)
    began = time.perf_counter()
    results = await pub.publish_many(
        (jetstream.Outgoing(f"full.{n}", order(n)) for n in range(6)), return_exceptions=True
    )
    took = time.perf_counter() - began
    refused = [r for r in results if isinstance(r, PublishError)]
    assert len(refused) == 3
    for error in refused:
        assert error.err_code == 10077  # maximum messages exceeded
        assert not error.may_be_stored
        assert "may still" not in str(error)
    assert took < AT_ONCE


async def test_a_core_publish_refusal_raises_on_the_next_publish_or_at_once_with_confirm(
    server: Server,
) -> None:
    nc = await server.connect("nopub")
    pub = gnats.Publisher(nc, CODEC)
    await pub.publish("denied.x", order(1))  # refused later, asynchronously
    async with asyncio.timeout(5):
        await server.error_seen.wait()  # the refusal is in (the user's callback saw it)
    error, took = await timed(lambda: pub.publish("denied.x", order(2)))
    assert isinstance(error, PermissionDenied)
    assert "not sent" in str(error)
    assert took < AT_ONCE
    await pub.publish("ok.y", order(3))  # other subjects are not affected

    error, took = await timed(lambda: pub.publish("denied.x", order(4), confirm=True))
    assert isinstance(error, PermissionDenied)
    assert took < AT_ONCE
    await pub.publish("ok.y", order(5), confirm=True)


async def test_a_request_to_a_denied_subject_fails_at_once(server: Server) -> None:
    nc = await server.connect("nopub")
    requester = gnats.Requester(nc, CODEC, CODEC, timeout=5.0)
    error, took = await timed(lambda: requester.request("denied.rpc", order(1)))
    assert isinstance(error, PermissionDenied)
    assert took < AT_ONCE


async def test_a_refused_reply_counts_as_failed(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    responder_nc = await server.connect("noreply")
    requester_nc = await server.connect("admin")

    async def echo(value: Order) -> Order:
        return value

    subscription = await gnats.Responder(responder_nc, CODEC, CODEC).start("rpc.echo", echo)
    requester = gnats.Requester(requester_nc, CODEC, CODEC, timeout=0.5)
    for n in range(3):
        with pytest.raises(RequestTimeout):  # the requester cannot know why: no reply came
            await requester.request("rpc.echo", order(n))
    async with asyncio.timeout(5):
        while len(server.errors) < 3:  # the refusals of the replies are in
            server.error_seen.clear()
            await server.error_seen.wait()
    assert subscription.failed == 3
    assert subscription.answered == 0
    refusal_logs = [r for r in caplog.records if "refuses replies" in r.getMessage()]
    assert len(refusal_logs) == 1
    await subscription.stop()


async def test_a_refused_reply_counts_as_an_error_of_the_micro_endpoint(server: Server) -> None:
    responder_nc = await server.connect("noreply")
    requester_nc = await server.connect("admin")

    async def echo(value: Order) -> Order:
        return value

    async with gnats.MicroService(responder_nc, name="rpc", version="1.0.0") as svc:
        responder = gnats.Responder(responder_nc, CODEC, CODEC, service=svc)
        subscription = await responder.start("rpc.echo", echo)
        requester = gnats.Requester(requester_nc, CODEC, CODEC, timeout=0.5)
        for n in range(2):
            with pytest.raises(RequestTimeout):
                await requester.request("rpc.echo", order(n))
        async with asyncio.timeout(5):
            while subscription.failed < 2:  # the refusals of the replies are in
                server.error_seen.clear()
                await server.error_seen.wait()
        (endpoint,) = svc.stats().endpoints
        assert (endpoint.num_requests, endpoint.num_errors) == (2, 2)
        assert endpoint.last_error.startswith("the server refused the reply: ")
        await responder.close()


async def test_a_refused_error_reply_counts_once(server: Server) -> None:
    """An error reply is an error already: its refusal must not count it again."""
    responder_nc = await server.connect("noreply")
    requester_nc = await server.connect("admin")

    async def picky(value: Order) -> Order:
        if value.id == "o-1":
            raise ServiceError(409, "not this one")
        return value

    async with gnats.MicroService(responder_nc, name="rpc", version="1.0.0") as svc:
        responder = gnats.Responder(responder_nc, CODEC, CODEC, service=svc)
        subscription = await responder.start("rpc.picky", picky)
        requester = gnats.Requester(requester_nc, CODEC, CODEC, timeout=0.5)
        for n in (0, 1):  # an answer, then an error reply: both refused
            with pytest.raises(RequestTimeout):
                await requester.request("rpc.picky", order(n))
        async with asyncio.timeout(5):
            while len(server.errors) < 2:  # the refusals of both replies are in
                server.error_seen.clear()
                await server.error_seen.wait()
        (endpoint,) = svc.stats().endpoints
        assert (endpoint.num_requests, endpoint.num_errors) == (2, 2)
        assert (subscription.answered, subscription.failed) == (0, 2)
        await responder.close()


# ---------------------------------------------------------------- subscribing


async def test_a_core_subscription_to_a_denied_subject_fails_to_start(server: Server) -> None:
    nc = await server.connect("nosub")
    sub = gnats.Subscriber(nc, CODEC)

    async def handler(message: Message[Order]) -> None:
        pass

    error, took = await timed(lambda: sub.start("denied.x", handler))
    assert isinstance(error, PermissionDenied)
    assert isinstance(error, SubscribeError)
    assert error.operation == "subscribe"
    assert took < AT_ONCE


async def test_denied_pull_requests_fail_the_subscription_at_start(server: Server) -> None:
    nc = await server.connect("nopull")
    sub = jetstream.Subscriber(nc.jetstream(), CODEC, stream=STREAM, consumer="WORK")

    async def handler(message: Message[Order]) -> None:
        pass

    error, took = await timed(lambda: sub.start("ok.>", handler))
    assert isinstance(error, PermissionDenied)
    assert "pull requests" in str(error)
    assert took < AT_ONCE


async def test_a_denied_consumer_create_fails_at_once(server: Server) -> None:
    nc = await server.connect("nocreate")
    sub = jetstream.Subscriber(nc.jetstream(), CODEC, stream=STREAM)

    async def handler(message: Message[Order]) -> None:
        pass

    error, took = await timed(lambda: sub.start("ok.>", handler))
    assert isinstance(error, PermissionDenied)
    assert took < AT_ONCE


async def test_denied_acks_end_the_subscription_instead_of_redelivering(
    server: Server,
) -> None:
    admin = await server.connect("admin")
    await publish_ok(admin, 3)
    nc = await server.connect("noack")
    sub = jetstream.Subscriber(nc.jetstream(), CODEC, stream=STREAM, consumer="WORK")
    handled: list[int] = []

    async def handler(message: Message[Order]) -> None:
        handled.append(message.payload.id)

    async def run() -> None:  # the refusal may come before start() returns, or after
        subscription = await sub.start("ok.>", handler)
        async with asyncio.timeout(10):
            await subscription.wait()

    error, took = await timed(run)
    assert isinstance(error, PermissionDenied)
    assert "acknowledging" in str(error)
    assert took < AT_ONCE
    assert len(handled) <= 3, "no redelivery loop"


async def test_ensure_stream_without_permission_or_jetstream_is_a_goflux_error(
    server: Server,
) -> None:
    nc = await server.connect("noinfo")
    error, took = await timed(
        lambda: jetstream.ensure_stream(nc.jetstream(), name="OTHER", subjects=["other.>"])
    )
    assert isinstance(error, PermissionDenied)
    assert took < AT_ONCE

    nojs = await server.connect("nojs")
    error, took = await timed(
        lambda: jetstream.ensure_stream(nojs.jetstream(), name="OTHER", subjects=["other.>"])
    )
    assert isinstance(error, JetStreamUnavailable)
    assert took < AT_ONCE


# -------------------------------------------------------------- config reload


async def test_a_reload_revoking_permissions_fails_subscriptions_and_publishes(
    server: Server,
) -> None:
    nc = await server.connect("reloaded")
    core = await gnats.Subscriber(nc, CODEC).start("ok.core", _ignore)
    pulled = await jetstream.Subscriber(
        nc.jetstream(), CODEC, stream=STREAM, consumer="WORK"
    ).start("ok.>", _ignore)
    pub = gnats.Publisher(nc, CODEC)
    await pub.publish("ok.core", order(1), confirm=True)

    await server.reload(revoked=True)
    began = time.perf_counter()
    with pytest.raises(PermissionDenied):
        async with asyncio.timeout(10):
            await core.wait()
    assert time.perf_counter() - began < AT_ONCE
    with pytest.raises(PublishError):
        await pub.publish("ok.core", order(2), confirm=True)
    with pytest.raises(PermissionDenied):  # its next pull request is refused
        async with asyncio.timeout(10):
            await pulled.wait()


async def test_a_user_removed_by_a_reload_fails_subscriptions_promptly(
    server: Server,
) -> None:
    nc = await server.connect("reloaded", reconnect_time_wait=0.1)
    core = await gnats.Subscriber(nc, CODEC).start("ok.core", _ignore)
    users_before = dict(USERS)
    try:
        del USERS["reloaded"]
        await server.reload()
        began = time.perf_counter()
        with pytest.raises(PermissionDenied) as caught:
            async with asyncio.timeout(10):
                await core.wait()
        assert caught.value.operation == "connect"
        assert time.perf_counter() - began < 2.0
    finally:
        USERS.clear()
        USERS.update(users_before)


async def _ignore(message: Message[Order]) -> None:
    pass


# ------------------------------------------------------------- server limits


async def test_a_lowered_max_payload_is_reported_with_the_servers_reason(
    server: Server,
) -> None:
    nc = await server.connect("admin", allow_reconnect=False)
    pub = gnats.Publisher(nc, gnats_bytes())
    await pub.publish("ok.big", b"x" * 2000, confirm=True)
    await server.reload(max_payload=1024)
    # The server does not tell clients of the new limit; it closes the connection
    # of one that goes over it. goflux reports that at once, with the reason.
    error, took = await timed(lambda: pub.publish("ok.big", b"x" * 2000, confirm=True))
    assert isinstance(error, PublishError)
    assert "maximum payload violation" in str(error)
    assert took < AT_ONCE
    error, _ = await timed(lambda: pub.publish("ok.big", b"x"))
    assert isinstance(error, PublishError)
    assert error.permanent
    assert "maximum payload violation" in str(error)

    fresh = await server.connect("admin")  # a new connection learns the new limit
    assert fresh.max_payload == 1024
    with pytest.raises(PublishError, match="max_payload of 1024"):
        await gnats.Publisher(fresh, gnats_bytes()).publish("ok.big", b"x" * 2000)


async def test_the_subscription_over_the_servers_limit_fails_with_its_reason(
    tmp_path: Path,
) -> None:
    conf = tmp_path / "limits.conf"
    conf.write_text("listen: 127.0.0.1:-1\nmax_subscriptions: 2\n")
    async with NatsServer(jetstream=False, args=["-c", str(conf)]) as srv:
        nc = await nats.connect(srv.url, allow_reconnect=False)
        sub = gnats.Subscriber(nc, CODEC)
        await sub.start("a", _ignore)
        await sub.start("b", _ignore)
        error, took = await timed(lambda: sub.start("c", _ignore))
        assert isinstance(error, SubscribeError)
        assert "maximum subscriptions exceeded" in str(error)
        assert took < AT_ONCE


async def test_a_responder_answers_the_first_request_after_start(server: Server) -> None:
    """start() returns once the server has the subscription: no early NoResponders."""
    responder_nc = await server.connect("admin")
    requester = gnats.Requester(await server.connect("admin"), CODEC, CODEC, timeout=5.0)

    async def echo(value: Order) -> Order:
        return value

    for n in range(100):
        subscription = await gnats.Responder(responder_nc, CODEC, CODEC).start(
            f"rpc.first.{n}", echo
        )
        assert (await requester.request(f"rpc.first.{n}", order(n))) == order(n)
        await subscription.stop()


def gnats_bytes() -> BytesCodec:
    return BytesCodec()


# ------------------------------------------------------- refusals of others


async def test_a_refused_api_request_fails_only_its_own_call(server: Server) -> None:
    admin = await server.connect("admin")
    await jetstream.ensure_stream(admin.jetstream(), name="OTHER", subjects=["other.>"])
    nc = await server.connect("nocreateb")
    js = nc.jetstream()
    for n in range(5):
        allowed, refused = await asyncio.gather(
            jetstream.ensure_consumer(js, stream=STREAM, name=f"MINE{n}", filter_subject="ok.>"),
            jetstream.ensure_consumer(js, stream="OTHER", name=f"THEIRS{n}"),
            return_exceptions=True,
        )
        assert not isinstance(allowed, BaseException), allowed
        assert isinstance(refused, PermissionDenied)


async def test_a_refused_queue_subscription_leaves_the_others_running(server: Server) -> None:
    nc = await server.connect("queues")
    plain = await gnats.Subscriber(nc, CODEC).start("jobs", _ignore)
    good = await gnats.Subscriber(nc, CODEC, queue="good").start("jobs", _ignore)
    with pytest.raises(PermissionDenied):
        await gnats.Subscriber(nc, CODEC, queue="bad").start("jobs", _ignore)
    await nc.flush()
    assert plain.running
    assert good.running


async def test_subjects_that_differ_by_case_are_not_confused(server: Server) -> None:
    nc = await server.connect("cased")
    admin = await server.connect("admin")
    await jetstream.ensure_stream(admin.jetstream(), name="CASED", subjects=["OK.Y"])
    core = gnats.Publisher(nc, CODEC)
    await core.publish("OK.X", order(1))  # refused
    async with asyncio.timeout(5):
        await server.error_seen.wait()
    await core.publish("ok.x", order(2), confirm=True)  # allowed: not confused with OK.X

    js = jetstream.Publisher(nc.jetstream(), CODEC)
    refused, stored = await asyncio.gather(  # ok.y is in the fixture's stream REFUSE
        js.publish("OK.Y", order(3)), js.publish("ok.y", order(4)), return_exceptions=True
    )
    assert isinstance(refused, PermissionDenied)
    assert not isinstance(stored, BaseException), stored

    foo = await gnats.Subscriber(nc, CODEC).start("foo", _ignore)
    with pytest.raises(PermissionDenied):
        await gnats.Subscriber(nc, CODEC).start("Foo", _ignore)
    assert foo.running


async def test_a_handlers_own_error_is_not_a_refusal(server: Server) -> None:
    nc = await server.connect("admin")
    subscription = await gnats.Subscriber(nc, CODEC).start("orders", _ignore)

    async def failing(msg: Any) -> None:
        raise PermissionError("user authentication failed for customer 42")

    await nc.subscribe("raw", cb=failing)  # nats-py passes its error to the error callback
    await nc.publish("raw", b"x")
    async with asyncio.timeout(5):
        await server.error_seen.wait()
    await nc.flush()
    assert subscription.running


async def test_a_refused_reply_inbox_fails_requests_and_publishes_at_once(
    server: Server,
) -> None:
    nc = await server.connect("noinbox")
    pub = jetstream.Publisher(nc.jetstream(), CODEC)
    error, took = await timed(lambda: pub.publish("ok.inbox", order(1)))
    assert isinstance(error, PermissionDenied)
    assert error.may_be_stored, "the publish went out; only its PubAck cannot come"
    assert not error.permanent, "never both: a retry with its ID fails at once, permanently"
    assert took < AT_ONCE
    results = await pub.publish_many(
        [jetstream.Outgoing("ok.inbox", order(2))], return_exceptions=True
    )
    assert isinstance(results[0], PermissionDenied)
    requester = gnats.Requester(nc, CODEC, CODEC, timeout=5.0)
    error, took = await timed(lambda: requester.request("svc", order(3)))
    assert isinstance(error, PermissionDenied)
    assert took < AT_ONCE


async def test_a_reply_that_is_not_a_puback_is_a_publish_error(server: Server) -> None:
    nc = await server.connect("admin")

    async def echo(value: Order) -> Order:
        return value

    await gnats.Responder(nc, CODEC, CODEC).start("svc.echo", echo)  # not a stream
    pub = jetstream.Publisher(nc.jetstream(), CODEC)
    error, _ = await timed(lambda: pub.publish("svc.echo", order(1)))
    assert isinstance(error, PublishError)
    assert "not a PubAck" in str(error)
    results = await pub.publish_many(
        [jetstream.Outgoing("svc.echo", order(2))], return_exceptions=True
    )
    assert isinstance(results[0], PublishError)
    assert "not a PubAck" in str(results[0])


async def test_a_connection_closed_by_its_owner_gives_no_stale_reason(server: Server) -> None:
    nc = await server.connect("nopub")
    pub = gnats.Publisher(nc, CODEC)
    with pytest.raises(PermissionDenied):
        await pub.publish("denied.x", order(1), confirm=True)
    await nc.close()
    error, _ = await timed(lambda: pub.publish("ok.x", order(2)))
    assert "the connection is closed" in str(error)
    assert "server said" not in str(error)


async def test_refusals_under_a_jetstream_domain_are_seen(tmp_path: Path) -> None:
    conf = tmp_path / "domain.conf"
    conf.write_text(
        f"""
listen: 127.0.0.1:-1
jetstream {{ store_dir: "{tmp_path / "js"}", domain: hub }}
accounts {{ APP {{ jetstream: enabled, users: [
  {{ user: admin, password: {PASSWORD} }},
  {{ user: u, password: {PASSWORD}, permissions: {{ publish: {{ deny: [
      "$JS.API.CONSUMER.MSG.NEXT.D.NOPULL", "$JS.API.STREAM.INFO.X"] }} }} }} ] }} }}
"""
    )
    async with NatsServer(jetstream=False, args=["-c", str(conf)]) as srv:
        admin = await nats.connect(srv.url, user="admin", password=PASSWORD)
        ajs = admin.jetstream(domain="hub")
        await jetstream.ensure_stream(ajs, name="D", subjects=["d.>"])
        await jetstream.ensure_consumer(ajs, stream="D", name="NOPULL")
        nc = await nats.connect(srv.url, user="u", password=PASSWORD)
        js = nc.jetstream(domain="hub")
        sub = jetstream.Subscriber(js, CODEC, stream="D", consumer="NOPULL")
        error, took = await timed(lambda: sub.start("d.>", _ignore))
        assert isinstance(error, PermissionDenied)
        assert took < AT_ONCE
        error, took = await timed(lambda: jetstream.ensure_stream(js, name="X", subjects=["x.>"]))
        assert isinstance(error, PermissionDenied)
        assert took < AT_ONCE
        await nc.close()
        await admin.close()


async def test_a_refused_object_chunk_fails_the_put_at_once(server: Server) -> None:
    admin = await server.connect("admin")
    await jetstream.object_store(admin.jetstream(), "FILES")
    nc = await server.connect("nochunks")
    store = await jetstream.object_store(nc.jetstream(), "FILES", create=False)
    error, took = await timed(lambda: store.put("report", bytes(1_000_000)))
    assert isinstance(error, PermissionDenied)
    assert "$O.FILES.C." in str(error)
    assert took < AT_ONCE
    assert await jetstream.object_store(admin.jetstream(), "FILES", create=False)
    assert (await admin.jetstream().stream_info("OBJ_FILES")).state.messages == 0
