"""The end-to-end demo (``goflux demo``): orders through a service, Spark, and back.

Needs ``goflux[all]`` and Java 17+ for Spark. See :mod:`goflux.demo.run`.
"""

from goflux.demo.model import CustomerRevenue, Order, make_orders
from goflux.demo.run import DemoConfig, DemoError, run_demo
from goflux.demo.summary import DemoSummary, print_summary

__all__ = (
    "CustomerRevenue",
    "DemoConfig",
    "DemoError",
    "DemoSummary",
    "Order",
    "make_orders",
    "print_summary",
    "run_demo",
)
