from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.conformance.harness import CAPABILITIES, HARNESSES, Harness


@pytest.fixture(params=sorted(HARNESSES))
async def harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(params=sorted(n for n, caps in CAPABILITIES.items() if "queue_groups" in caps))
async def queue_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(
    params=sorted(n for n, caps in CAPABILITIES.items() if "multi_value_headers" in caps)
)
async def multi_header_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(params=sorted(n for n, caps in CAPABILITIES.items() if "acks" in caps))
async def ack_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(params=sorted(n for n, caps in CAPABILITIES.items() if "headers" in caps))
async def header_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(params=sorted(n for n, caps in CAPABILITIES.items() if "message_ids" in caps))
async def id_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(
    params=sorted(n for n, caps in CAPABILITIES.items() if "spans_named_by_subject" in caps)
)
async def span_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(params=sorted(n for n, caps in CAPABILITIES.items() if "every_message" in caps))
async def every_message_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h


@pytest.fixture(params=sorted(n for n, caps in CAPABILITIES.items() if "decoupled" in caps))
async def decoupled_harness(request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
    async with HARNESSES[request.param]() as h:
        yield h
