"""The demo's summary: what it measured, the checks, and the printed table."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TextIO

__all__ = ("NEXT_STEPS", "DemoSummary", "check", "print_next_steps", "print_summary")

NEXT_STEPS = """
next steps
  read    https://goflux-py.github.io/goflux/getting-started.html#quick-start (docs/ in a checkout)
  test    ./scripts/check.sh --fast in a checkout of https://github.com/goflux-py/goflux
          (./scripts/check.sh runs every test)
"""
"""What the demo prints last: the docs page to read next, and the command that tests."""


@dataclass
class DemoSummary:
    """What the demo measured, and whether each promise held."""

    published: int = 0
    resent: int = 0
    stored_once: int = 0
    valid: int = 0
    accepted: int = 0
    flaky: int = 0
    flaky_accepted_after_retries: int = 0
    transient_failures: int = 0
    invalid: int = 0
    dead_lettered: int = 0
    spark_batches: int = 0
    results_published: int = 0
    results_received: int = 0
    windows: int = 0
    aggregated_orders: int = 0
    aggregated_revenue: float = 0.0
    expected_revenue: float = 0.0
    producer_spans: int = 0
    consumer_spans: int = 0
    consumer_spans_linked: int = 0
    hops_in_trace: int = 0
    seconds: float = 0.0
    checks: dict[str, bool] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        """Every check held."""
        return bool(self.checks) and all(self.checks.values())

    def as_dict(self) -> dict[str, object]:
        """The summary as plain data (for ``--summary-json``)."""
        return {**asdict(self), "ok": self.ok}


def check(summary: DemoSummary) -> dict[str, bool]:
    """Each promise of the demo, and whether the measurements show it held."""
    return {
        "re-sent orders stored once (server de-duplication)": summary.resent > 0
        and summary.stored_once == summary.published,
        "every valid order accepted once": summary.accepted == summary.valid,
        "every order in the aggregates exactly once": summary.aggregated_orders == summary.valid,
        "revenue matches the orders": abs(summary.aggregated_revenue - summary.expected_revenue)
        < 0.01 * max(summary.windows, 1),
        "flaky orders retried and accepted": summary.flaky > 0
        and summary.flaky_accepted_after_retries == summary.flaky
        and summary.transient_failures == 2 * summary.flaky,
        "invalid orders dead-lettered": summary.invalid > 0
        and summary.dead_lettered == summary.invalid,
        "Spark results published back": summary.results_published > 0
        and summary.results_received == summary.results_published,
        "consumer spans linked to producers": summary.consumer_spans > 0
        and summary.consumer_spans_linked == summary.consumer_spans,
        "trace continues across the hop": summary.hops_in_trace == summary.valid,
    }


def print_summary(summary: DemoSummary, out: TextIO) -> None:
    """Print the summary table and the checks."""
    rows = [
        ("orders published", summary.published),
        ("re-sent by the shop (lost acks) / stored", f"{summary.resent} / {summary.stored_once}"),
        ("accepted by the payment service", summary.accepted),
        ("transient failures retried", summary.transient_failures),
        ("flaky orders accepted after 2 retries", f"{summary.flaky_accepted_after_retries}"
         f" of {summary.flaky}"),
        ("dead-lettered (invalid amount)", f"{summary.dead_lettered} of {summary.invalid}"),
        ("Spark micro-batches", summary.spark_batches),
        ("results published back / received", f"{summary.results_published} / "
         f"{summary.results_received}"),
        ("customer-minute windows", summary.windows),
        ("orders in the aggregates", f"{summary.aggregated_orders} (expected {summary.valid})"),
        ("revenue in the aggregates", f"{summary.aggregated_revenue:.2f} (expected "
         f"{summary.expected_revenue:.2f})"),
        ("consumer spans linked to their producer", f"{summary.consumer_spans_linked} of "
         f"{summary.consumer_spans}"),
        ("accepted publishes inside the consumer's trace", summary.hops_in_trace),
        ("seconds", f"{summary.seconds:.1f}"),
    ]  # fmt: skip
    width = max(len(name) for name, _ in rows)
    out.write("\nsummary\n")
    for name, value in rows:
        out.write(f"  {name:<{width}}  {value}\n")
    out.write("\nchecks\n")
    for name, held in summary.checks.items():
        out.write(f"  [{'ok' if held else 'FAILED'}] {name}\n")
    out.flush()


def print_next_steps(out: TextIO) -> None:
    """Print :data:`NEXT_STEPS`: where to read on, and how to run the tests."""
    out.write(NEXT_STEPS)
    out.flush()
