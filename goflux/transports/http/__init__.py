"""The HTTP transport: Go goflux's fourth transport, typed, traced, wire-compatible.

Import it module-qualified::

    from goflux.transports import http as ghttp

    publisher = ghttp.Publisher("http://orders.internal/hooks", JsonCodec(Order))
    await publisher.publish("orders.created", order)  # POST /hooks/orders.created

    subscriber = ghttp.Subscriber(JsonCodec(Order), base_path="/hooks")
    await subscriber.start("orders.created", handle_order)
    app = subscriber.app  # an ASGI app: uvicorn, app.mount(...), goflux run --http-port
    ghttp.app_of(group)  # one app serving the routes of every HTTP member of a group

    requester = ghttp.Requester("http://pricing.internal", JsonCodec(Quote), JsonCodec(Price))
    responder = ghttp.Responder(JsonCodec(Quote), JsonCodec(Price))

The wire is Go goflux's: ``POST {base}/{subject}`` with the encoded body,
``X-Goflux-{name}`` user headers, ``X-Message-ID``, W3C ``traceparent``; the
subscriber answers 204, 400, 405, 413 or 500 as Go's does (and 404, 408, 415, 422,
503 where Go's has no answer). The body is the codec's bytes, ``Content-Type`` the
codec's, and a codec's compression is never sent as ``Content-Encoding``.
Subscribers and responders own no listener.

Needs ``goflux[http]`` (httpx and Starlette).
"""

from goflux._extras import require

require("httpx", "http", "goflux.transports.http")
require("starlette", "http", "goflux.transports.http")

from goflux._exports import publish_names as _publish_names  # noqa: E402
from goflux.transports.http._client import DEFAULT_TIMEOUT  # noqa: E402
from goflux.transports.http._errors import StatusError  # noqa: E402
from goflux.transports.http._group import app_of  # noqa: E402
from goflux.transports.http._publisher import Publisher  # noqa: E402
from goflux.transports.http._requester import Requester  # noqa: E402
from goflux.transports.http._responder import Responder, ResponderRoute  # noqa: E402
from goflux.transports.http._router import Route, Router  # noqa: E402
from goflux.transports.http._served import (  # noqa: E402
    DEFAULT_BODY_TIMEOUT,
    DEFAULT_DRAIN_TIMEOUT,
    DEFAULT_MAX_BODY_SIZE,
)
from goflux.transports.http._subscriber import (  # noqa: E402
    NAK_STATUS,
    TERM_STATUS,
    HttpSubscription,
    Subscriber,
)
from goflux.transports.http._system import SYSTEM  # noqa: E402

__all__ = (
    "DEFAULT_BODY_TIMEOUT",
    "DEFAULT_DRAIN_TIMEOUT",
    "DEFAULT_MAX_BODY_SIZE",
    "DEFAULT_TIMEOUT",
    "NAK_STATUS",
    "SYSTEM",
    "TERM_STATUS",
    "HttpSubscription",
    "Publisher",
    "Requester",
    "Responder",
    "ResponderRoute",
    "Route",
    "Router",
    "StatusError",
    "Subscriber",
    "app_of",
)

_publish_names(__name__, globals())
