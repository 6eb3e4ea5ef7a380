"""The demo's parts that need no Spark: orders, the payment service, config, summary.

The whole demo (with its Spark job) runs in tests/e2e/test_examples.py (e2e, spark).
"""

from __future__ import annotations

import io
import re
from datetime import timedelta

import pytest

from goflux import Message, NonRetryable
from goflux.demo.model import CUSTOMERS, Order, flaky_orders, make_orders
from goflux.demo.run import DemoConfig, Progress
from goflux.demo.service import FlakyGateway, GatewayUnavailable, PaymentService
from goflux.demo.summary import DemoSummary, check, print_next_steps, print_summary
from goflux.transports import channel
from tests.helpers import Inbox
from tests.test_readme import wrong_links


def test_orders_are_the_same_every_run_with_every_13th_invalid() -> None:
    orders = make_orders(60)
    assert orders == make_orders(60)
    assert [o.id for o in orders[:2]] == ["o-00000", "o-00001"]
    invalid = [n for n, o in enumerate(orders) if o.amount <= 0]
    assert invalid == [12, 25, 38, 51]
    assert {o.customer for o in orders} == set(CUSTOMERS)
    assert orders[-1].placed - orders[0].placed < timedelta(minutes=5)
    flaky = flaky_orders(orders)
    assert flaky == {f"o-{n:05d}" for n in (3, 10, 17, 24, 31, 45, 52, 59)}  # 38 is invalid


async def test_the_payment_service_accepts_retries_and_rejects() -> None:
    orders = make_orders(13)
    good, flaky, bad = orders[0], orders[3], orders[12]
    bus: channel.Bus[Order] = channel.Bus()
    accepted: Inbox[Order] = Inbox()
    await channel.Subscriber(bus).start("orders.accepted", accepted)
    service = PaymentService(FlakyGateway({flaky.id}), channel.Publisher(bus))

    await service(Message("orders.created", good))
    for _ in range(2):  # the gateway fails a flaky order twice
        with pytest.raises(GatewayUnavailable):
            await service(Message("orders.created", flaky))
    await service(Message("orders.created", flaky))
    with pytest.raises(NonRetryable, match="non-positive amount"):
        await service(Message("orders.created", bad))

    got = await accepted.wait_for(2)
    assert [m.payload.id for m in got] == [good.id, flaky.id]
    assert [m.id for m in got] == [f"accepted:{good.id}", f"accepted:{flaky.id}"]
    counts = service.counts
    assert (counts.accepted, counts.retried, counts.rejected) == (2, 2, 1)
    assert counts.deliveries == {good.id: 1, flaky.id: 3, bad.id: 1}
    assert service.settled == {good.id, flaky.id, bad.id}


def test_the_config_refuses_a_demo_too_small_to_show_anything() -> None:
    with pytest.raises(ValueError, match="at least 13 orders"):
        DemoConfig(orders=12)
    with pytest.raises(ValueError, match="batches must be >= 1"):
        DemoConfig(batches=0)
    assert DemoConfig(orders=13).master == "local[*]"


def test_progress_off_a_terminal_prints_changed_lines_only_when_forced_or_due() -> None:
    out = io.StringIO()
    progress = Progress(out)
    progress.update(force=True, published=1)
    progress.update(published=2)  # within 2 s of the last line: not shown
    progress.update(force=True, published=2, accepted=1)
    progress.update(force=True, published=2, accepted=1)  # unchanged: not shown
    progress.done()
    assert out.getvalue() == "  published 1\n  published 2 | accepted 1\n"


def test_the_summary_checks_every_promise_and_prints_them() -> None:
    summary = DemoSummary(
        published=60, resent=10, stored_once=60, valid=56, accepted=56, flaky=8,
        flaky_accepted_after_retries=8, transient_failures=16, invalid=4, dead_lettered=4,
        spark_batches=2, results_published=30, results_received=30, windows=25,
        aggregated_orders=56, aggregated_revenue=1234.5, expected_revenue=1234.5,
        consumer_spans=76, consumer_spans_linked=76, hops_in_trace=56,
    )  # fmt: skip
    assert not summary.ok  # no checks yet
    summary.checks = check(summary)
    assert summary.ok
    assert summary.as_dict()["ok"] is True
    summary.dead_lettered = 3
    summary.checks = check(summary)
    assert [name for name, held in summary.checks.items() if not held] == [
        "invalid orders dead-lettered"
    ]
    out = io.StringIO()
    print_summary(summary, out)
    text = out.getvalue()
    assert "  dead-lettered (invalid amount)" in text
    assert text.count("[ok]") == 8
    assert "[FAILED] invalid orders dead-lettered" in text


def test_the_demo_ends_with_what_to_read_and_how_to_test() -> None:
    out = io.StringIO()
    print_next_steps(out)
    text = out.getvalue()
    assert text.startswith("\nnext steps\n")
    assert "./scripts/check.sh --fast" in text
    urls = re.findall(r"https://\S+", text)
    assert len(urls) == 2
    assert wrong_links(" ".join(f"<{url}>" for url in urls)) == []  # the page and heading exist
