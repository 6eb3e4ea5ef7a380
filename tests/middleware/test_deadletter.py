"""Dead-letter headers: metadata, sanitising, replacing an earlier dead-lettering."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from goflux import Headers, InvalidSubject, Message
from goflux._message import Delivery
from goflux.middleware import DeadLetter, dead_letter_headers
from goflux.transports import channel

NOW = datetime(2026, 11, 22, 12, 0, 0, 123456, tzinfo=UTC)


def test_metadata_headers_for_a_jetstream_message() -> None:
    delivery = Delivery(
        stream="ORDERS",
        consumer="billing",
        stream_sequence=42,
        consumer_sequence=50,
        num_delivered=3,
        num_pending=0,
        timestamp=datetime(2026, 11, 22, 11, 59, 59, tzinfo=UTC),
    )
    message = Message(
        "orders.created",
        b"{}",
        headers=Headers({"Tenant": "acme"}),
        id="order-1",
        delivery=delivery,
    )
    headers = dead_letter_headers(message, KeyError("sku"), "max_attempts", now=NOW)
    assert dict(headers.multi_items()) == {
        "Tenant": "acme",
        "Dead-Letter-Reason": "max_attempts",
        "Dead-Letter-Error-Type": "KeyError",
        "Dead-Letter-Error": "'sku'",
        "Dead-Letter-Subject": "orders.created",
        "Dead-Letter-Message-Id": "order-1",
        "Dead-Letter-Stream": "ORDERS",
        "Dead-Letter-Sequence": "42",
        "Dead-Letter-Consumer": "billing",
        "Dead-Letter-Delivery-Count": "3",
        "Dead-Letter-Timestamp": "2026-11-22T11:59:59.000000Z",
        "Dead-Letter-Failed-At": "2026-11-22T12:00:00.123456Z",
    }


def test_error_text_is_one_bounded_line() -> None:
    message = Message("s", b"x")
    error = ValueError("line one\r\nline two\x00" + "x" * 5000)
    headers = dead_letter_headers(message, error, "non_retryable", attempts=2, now=NOW)
    text = headers["Dead-Letter-Error"]
    assert "\n" not in text
    assert "\r" not in text
    assert "\x00" not in text
    assert text.startswith("line one line two ")
    assert len(text) == 1024
    assert text.endswith("...")
    assert headers["Dead-Letter-Delivery-Count"] == "2"
    assert "Dead-Letter-Stream" not in headers
    empty = dead_letter_headers(message, RuntimeError(), "non_retryable", now=NOW)
    assert empty["Dead-Letter-Error"] == "RuntimeError"


def test_an_earlier_dead_lettering_is_replaced_not_appended() -> None:
    earlier = Headers({"dead-letter-reason": "undecodable", "Dead-Letter-Stream": "OLD", "A": "1"})
    message = Message("dlq.replay", b"x", headers=earlier)
    headers = dead_letter_headers(message, ValueError("again"), "non_retryable", now=NOW)
    assert headers.get_all("Dead-Letter-Reason") == ["non_retryable"]
    assert "Dead-Letter-Stream" not in headers
    assert headers["A"] == "1"


def test_a_dead_letter_needs_a_valid_subject() -> None:
    publisher = channel.Publisher(channel.Bus[bytes]())
    with pytest.raises(InvalidSubject):
        DeadLetter(publisher, "dlq.*")
    dead_letter = DeadLetter(publisher, "dlq.orders")
    assert (dead_letter.subject, dead_letter.publisher) == ("dlq.orders", publisher)
    assert repr(dead_letter) == "DeadLetter(subject='dlq.orders')"


def test_an_unencodable_subject_is_escaped() -> None:
    message = Message("in.\udcff", b"x")
    headers = dead_letter_headers(message, ValueError("x"), "non_retryable", now=NOW)
    assert headers["Dead-Letter-Subject"] == "in.\\udcff"
