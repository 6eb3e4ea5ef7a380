"""A pricing service that describes itself: AsyncAPI from its code, NATS micro discovery.

- Quotes over request/reply: a responder on ``pricing.quote``, registered as the NATS
  micro service ``pricing`` (``goflux services`` and ``nats micro ls`` list it).
- Stock levels from core NATS on ``stock.<warehouse>.level`` (a wildcard: a channel
  parameter in the document), in the queue group ``pricing``.
- Price changes published to JetStream on ``prices.<sku>``, declared with
  ``group.sends`` because the publisher is not bound to one subject.

Describe it, serve it, or list it once it runs::

    goflux server &                                                     # :4222
    goflux asyncapi examples.pricing_service:service --format yaml      # the document
    goflux asyncapi examples.pricing_service:service --serve            # in a browser
    goflux run examples.pricing_service:service &
    goflux services                                                     # micro services

``NATS_URL`` (default nats://127.0.0.1:4222) says where the server is.
"""

from __future__ import annotations

import os

import nats
from pydantic import BaseModel, Field

from goflux import Group, JsonCodec, Message, ServiceError
from goflux.transports import jetstream
from goflux.transports import nats as gnats


class Money(BaseModel):
    amount: float
    currency: str = Field(min_length=3, max_length=3)


class Line(BaseModel):
    sku: str
    quantity: int = Field(gt=0)


class QuoteRequest(BaseModel):
    customer: str
    lines: list[Line]


class PricedLine(BaseModel):
    line: Line
    price: Money


class Quote(BaseModel):
    customer: str
    lines: list[PricedLine]
    total: Money


class StockLevel(BaseModel):
    sku: str
    available: int


class PriceChanged(BaseModel):
    sku: str
    price: Money


PRICES = {"apple": 0.5, "pear": 0.75, "plum": 0.2}


class Pricing:
    """Prices per SKU; a SKU out of stock is not quoted and its price goes up."""

    def __init__(self, changes: jetstream.Publisher[PriceChanged]) -> None:
        self.prices = dict(PRICES)
        self.out_of_stock: set[str] = set()
        self._changes = changes

    async def quote(self, request: QuoteRequest) -> Quote:
        """Price every line of a quote request."""
        priced = []
        for line in request.lines:
            if line.sku not in self.prices:
                raise ServiceError(404, f"no price for {line.sku!r}")
            if line.sku in self.out_of_stock:
                raise ServiceError(409, f"{line.sku!r} is out of stock")
            price = Money(amount=self.prices[line.sku] * line.quantity, currency="EUR")
            priced.append(PricedLine(line=line, price=price))
        total = Money(amount=sum(p.price.amount for p in priced), currency="EUR")
        return Quote(customer=request.customer, lines=priced, total=total)

    async def on_stock(self, message: Message[StockLevel]) -> None:
        """Follow stock levels; a SKU that runs out gets dearer."""
        level = message.payload
        if level.available > 0:
            self.out_of_stock.discard(level.sku)
            return
        if level.sku in self.out_of_stock or level.sku not in self.prices:
            return
        self.out_of_stock.add(level.sku)
        self.prices[level.sku] = round(self.prices[level.sku] * 1.1, 2)
        change = PriceChanged(
            sku=level.sku, price=Money(amount=self.prices[level.sku], currency="EUR")
        )
        await self._changes.publish(
            f"prices.{level.sku}", change, headers={"Reason": "out of stock"}
        )


async def service(group: Group) -> Pricing:
    """Quotes prices, follows stock levels, and announces price changes."""
    nc = group.own(await nats.connect(os.environ.get("NATS_URL", "nats://127.0.0.1:4222")))
    js = nc.jetstream()
    group.describe(title="pricing", version="2.1.0")

    async def provision() -> None:
        """The stream of price changes (not made when the service is only described)."""
        await jetstream.ensure_stream(js, name="PRICES", subjects=["prices.>"])

    group.on_start(provision)
    micro = group.own(
        gnats.MicroService(
            nc, name="pricing", version="2.1.0", description="Quotes prices for order lines"
        )
    )
    changes = group.sends(
        group.own(jetstream.Publisher(js, JsonCodec(PriceChanged))),
        "prices.*",
        description="A SKU's new price.",
        headers={"Reason": "Why the price changed."},
    )
    pricing = Pricing(changes)
    quotes = group.own(
        gnats.Responder(nc, JsonCodec(QuoteRequest), JsonCodec(Quote), service=micro)
    )
    group.respond(quotes, "pricing.quote", pricing.quote, endpoint="quote")
    stock = group.own(gnats.Subscriber(nc, JsonCodec(StockLevel), queue="pricing"))
    group.subscribe(stock, "stock.*.level", pricing.on_stock)
    return pricing
