"""examples/pricing_service.py under ``goflux run``: a micro service others can discover.

Its quotes are counted in ``$SRV.STATS`` as a nats.js client reads them, ``goflux
services`` lists it, its start-up function made its stream, and a stock level that
runs out publishes a price change with its declared header.
"""

from __future__ import annotations

import asyncio
import sys

import nats
import pytest

from examples.pricing_service import Line, PriceChanged, Quote, QuoteRequest, StockLevel
from goflux import JsonCodec, RemoteError
from goflux.testing import NatsServer
from goflux.transports import jetstream
from goflux.transports import nats as gnats
from tests.helpers import Inbox
from tests.nodejs import run_node
from tests.service.runner import ROOT, GofluxRun

pytestmark = pytest.mark.e2e


async def test_the_pricing_service_is_discoverable_and_counted(nats_server: NatsServer) -> None:
    url = nats_server.url
    with GofluxRun("examples.pricing_service:service", env={"NATS_URL": url}) as run:
        run.wait_for(r"examples.pricing_service:service is running")
        nc = await nats.connect(url)
        try:
            js = nc.jetstream()
            assert (await js.stream_info("PRICES")).config.subjects == ["prices.>"]
            requester = gnats.Requester(nc, JsonCodec(QuoteRequest), JsonCodec(Quote), timeout=5)
            codes = []
            for n in range(100):
                sku = "ghost" if n % 14 == 13 else "apple"  # 7 of 100 have no price
                request = QuoteRequest(customer=f"c-{n}", lines=[Line(sku=sku, quantity=2)])
                try:
                    quote = await requester.request("pricing.quote", request)
                except RemoteError as exc:
                    codes.append(exc.code)
                else:
                    assert quote.total.amount == 1.0
            assert codes == [404] * 7

            seen = await run_node("micro_client.mjs", url, "pricing")
            (info,) = seen["info"]
            assert (info["name"], info["version"]) == ("pricing", "2.1.0")
            assert [(e["name"], e["subject"], e["queue_group"]) for e in info["endpoints"]] == [
                ("quote", "pricing.quote", "q")
            ]
            ((endpoint,),) = (stats["endpoints"] for stats in seen["stats"])
            assert (endpoint["num_requests"], endpoint["num_errors"]) == (100, 7)
            assert endpoint["last_error"] == "404:no price for 'ghost'"

            listing = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "goflux", "services", "--server", url, "pricing",
                cwd=ROOT, stdout=asyncio.subprocess.PIPE,
            )  # fmt: skip
            out, _ = await listing.communicate()
            assert listing.returncode == 0
            (row,) = out.decode().splitlines()[1:]
            assert row.split()[:2] == ["pricing", info["id"]]
            assert row.split()[2:8] == ["2.1.0", "quote", "pricing.quote", "q", "100", "7"]

            changes = Inbox[PriceChanged]()
            subscriber = jetstream.Subscriber(js, JsonCodec(PriceChanged), stream="PRICES")
            async with subscriber, await subscriber.start("prices.*", changes):
                await gnats.Publisher(nc, JsonCodec(StockLevel)).publish(
                    "stock.berlin.level", StockLevel(sku="pear", available=0)
                )
                (changed,) = await changes.wait_for(1)
            assert changed.subject == "prices.pear"
            assert changed.payload.price.amount == 0.83
            assert changed.headers["Reason"] == "out of stock"
        finally:
            await nc.close()
        run.signal()
        assert run.wait() == 0, run.output
