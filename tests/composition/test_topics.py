"""Bound publishers, subscribers and topics."""

from __future__ import annotations

import pytest

from goflux import InvalidSubject, bind_publisher, bind_subscriber, bind_topic
from goflux.transports import channel
from tests.helpers import Inbox


async def test_topic_publishes_and_subscribes_on_its_subject_and_closes_both() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    inbox = Inbox[int]()
    async with bind_topic(pub, sub, "numbers") as topic:
        assert topic.subject == "numbers"
        await topic.start(inbox)
        await topic.publish(1)
        await topic.publish(2, headers={"K": "v"}, message_id="two")
        got = await inbox.wait_for(2)
        async with topic.stream(buffer=4) as stream:
            await topic.publish(3)
            assert (await anext(stream)).payload == 3
    assert [m.payload for m in got] == [1, 2, 3]  # the drain on close delivered the third
    assert got[1].id == "two"
    assert got[1].headers["K"] == "v"
    with pytest.raises(Exception, match="closed"):
        await pub.publish("numbers", 4)
    with pytest.raises(Exception, match="closed"):
        await sub.start("numbers", inbox)


async def test_bound_views_validate_subjects_and_close_what_they_wrap() -> None:
    bus: channel.Bus[int] = channel.Bus()
    pub, sub = channel.Publisher(bus), channel.Subscriber(bus)
    with pytest.raises(InvalidSubject):
        bind_publisher(pub, "a.*")
    with pytest.raises(InvalidSubject):
        bind_topic(pub, sub, "a.>")
    with pytest.raises(InvalidSubject):
        bind_subscriber(sub, "a..b")
    wild = bind_subscriber(sub, "a.*")
    inbox = Inbox[int]()
    await wild.start(inbox)
    bound = bind_publisher(pub, "a.b")
    await bound.publish(5)
    assert (await inbox.wait_for(1))[0].subject == "a.b"
    await bound.close()
    await wild.close()
    with pytest.raises(Exception, match="closed"):
        await pub.publish("a.b", 6)
    with pytest.raises(Exception, match="closed"):
        await sub.start("a.b", inbox)
