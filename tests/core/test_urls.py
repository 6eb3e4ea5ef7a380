"""redact_url: credentials in server URLs never reach output."""

from __future__ import annotations

import pytest

from goflux._urls import redact_url


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("nats://127.0.0.1:4222", "nats://127.0.0.1:4222"),
        ("nats://alice:secret@h:4222", "nats://***@h:4222"),
        ("nats://token@h", "nats://***@h"),
        ("nats://alice:TOP,SECRET@h:1", "nats://***@h:1"),  # a comma in the password
        ("tls://u:p/#?x@h:1,nats://h3", "tls://***@h:1,nats://h3"),
        ("nats://a:b@h1,nats://c:d@h2", "nats://***@h1,nats://***@h2"),
        ("nats://h1,nats://c:d@h2", "nats://h1,nats://***@h2"),
        ("alice:secret@h:4222", "***@h:4222"),  # no scheme
        ("h:4222", "h:4222"),
    ],
)
def test_credentials_are_masked(url: str, shown: str) -> None:
    assert redact_url(url) == shown
