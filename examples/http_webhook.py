"""Payment webhooks taken in over HTTP, and posted to it, on Go goflux's wire.

- A ``ghttp.Subscriber`` serves ``POST /hooks/payments.<event>`` (one wildcard route)
  with uvicorn. Anyone may post there: Go goflux's HTTP publisher, curl, a payment
  provider's webhook. The body is the JSON payment, ``X-Message-ID`` its ID,
  ``X-Goflux-*`` headers its goflux headers.
- The handler's settlement is the answer: a payment booked (or booked before: the
  same message ID again) is acknowledged, 204; a negative amount is terminated, 422,
  and never sent again; while the ledger is locked the handler asks the sender to
  come back later, 503 with ``Retry-After``.
- A ``ghttp.Publisher`` wrapped in ``retry_publish`` posts payments, keeping each
  payment's message ID across attempts: it retries the 503 and gives up on the 422
  at once (``StatusError.permanent``).

Run: python examples/http_webhook.py
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import httpx
import uvicorn
from pydantic import BaseModel
from starlette.types import ASGIApp

from goflux import JsonCodec, Message
from goflux.middleware import retry_publish
from goflux.transports import http as ghttp


class Payment(BaseModel):
    order_id: str
    amount: float


@contextlib.asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on a free loopback port; yield its URL."""
    sock = socket.create_server(("127.0.0.1", 0))  # listening: requests queue from here on
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        await task


class Ledger:
    """Books each payment once; locked for its first ``locked`` deliveries."""

    def __init__(self, locked: int) -> None:
        self.booked: dict[str, float] = {}
        self._locked = locked

    async def on_payment(self, msg: Message[Payment]) -> None:
        """Book a payment, at most once per message ID."""
        payment, key = msg.payload, msg.id or msg.payload.order_id
        if payment.amount < 0:
            await msg.term(f"negative amount {payment.amount}")  # 422
            return
        if self._locked > 0:
            self._locked -= 1
            print(f"{key}: the ledger is locked, the sender is asked to come back")
            await msg.nak(1.0)  # 503 with Retry-After: 1
            return
        if key in self.booked:
            print(f"{key}: booked before, acknowledged again")
            return  # 204: the sender may stop retrying
        self.booked[key] = payment.amount
        provider = msg.headers.get("Provider", "?")
        print(f"{key}: booked {payment.amount:.2f} for {payment.order_id} from {provider}")


async def main() -> None:
    ledger = Ledger(locked=1)
    codec = JsonCodec(Payment)
    async with ghttp.Subscriber(codec, base_path="/hooks", max_body_size=64 * 1024) as hooks:
        await hooks.start("payments.*", ledger.on_payment)
        async with serve(hooks.app) as url:
            print(f"webhooks at {url}/hooks/payments.<event>")
            inner = ghttp.Publisher(f"{url}/hooks", codec, timeout=5)
            publisher = retry_publish(attempts=3, backoff=[0.05])(inner)
            async with inner:
                for message_id, payment in (
                    ("pay-1", Payment(order_id="o-1", amount=25)),  # 503 first, then 204
                    ("pay-2", Payment(order_id="o-2", amount=10)),
                    ("pay-1", Payment(order_id="o-1", amount=25)),  # the same payment again
                    ("pay-3", Payment(order_id="o-3", amount=-5)),
                ):
                    try:
                        await publisher.publish(
                            "payments.captured",
                            payment,
                            headers={"Provider": "acme"},
                            message_id=message_id,
                        )
                    except ghttp.StatusError as exc:
                        print(
                            f"{message_id}: refused {exc.status} ({exc.detail}), "
                            f"permanent={exc.permanent}"
                        )
            # What a client of another language sends: the same route, headers, answers.
            async with httpx.AsyncClient(base_url=url) as client:
                answer = await client.post(
                    "/hooks/payments.refunded",
                    content=b'{"order_id": "o-4", "amount": 7.5}',
                    headers={"X-Message-ID": "pay-4", "X-Goflux-Provider": "curl"},
                )
                print(f"pay-4: {answer.status_code}")
                answer = await client.post("/hooks/payments.refunded", content=b"{}")
                print(f"undecodable: {answer.status_code} {answer.text.split(':')[0]}")
    print(f"booked: {ledger.booked}")


if __name__ == "__main__":
    asyncio.run(main())
