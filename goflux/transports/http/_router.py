"""The ASGI application serving HTTP subscriptions and responders: :class:`Router`."""

from __future__ import annotations

from typing import Protocol

from starlette.types import Receive, Scope, Send

from goflux._errors import InvalidSubject, SubscribeError
from goflux._subjects import is_wildcard, tokens_match, validate_subject
from goflux.transports.http._answers import send_error
from goflux.transports.http._wire import route_path

__all__ = ("Route", "Router")


class Route(Protocol):
    """One subject served at ``{base_path}/{pattern}``: a subscription or a responder's."""

    @property
    def base_path(self) -> str:
        """The path prefix (``""`` or ``/a/b``)."""
        ...

    @property
    def subject(self) -> str:
        """The subject pattern served (wildcards allowed)."""
        ...

    @property
    def running(self) -> bool:
        """False once stopped (the route then answers 503)."""
        ...

    async def serve(self, scope: Scope, receive: Receive, send: Send, subject: str) -> None:
        """Answer one POST for the concrete ``subject``."""
        ...


def _specificity(entry: tuple[str, tuple[str, ...], Route]) -> tuple[int, int, int]:
    """Sort key of a wildcard route: most specific first (``*`` before ``>``, longer first)."""
    tokens = entry[1]
    return (tokens.count(">"), tokens.count("*"), -len(tokens))


class Router:
    """An ASGI application: ``POST {base_path}/{subject}`` to the route serving it.

    A :class:`~goflux.transports.http.Subscriber` or
    :class:`~goflux.transports.http.Responder` registers a route here per started
    subject; its ``app`` is its router. Serve it with any ASGI server (uvicorn) or
    mount it in FastAPI or Starlette (``app.mount("/hooks", sub.app)``). Several
    subscribers and responders can share one router (``router=``), and
    :meth:`merged` serves the routes of several routers as one app.

    Answers besides the routes' own: 404 for a path that is no route (including a
    path that is no valid subject), 405 (with ``Allow: POST``) for another method
    than POST on a route.

    One route answers each path: a subject started as it is (``orders.created``)
    before any wildcard; among wildcards the most specific (``orders.*`` before
    ``orders.>``; fewer ``*`` first; then the one started first). A stopped route
    answers 503 for its path until a route is started there again, unless a running
    route (a wildcard) serves the path too.
    """

    def __init__(self) -> None:
        self._exact: dict[str, tuple[Route, str]] = {}
        self._wild: list[tuple[str, tuple[str, ...], Route]] = []
        self._children: tuple[Router, ...] = ()

    @classmethod
    def merged(cls, *routers: Router) -> Router:
        """One app serving the routes of ``routers`` (looked up in that order)."""
        merged = cls()
        merged._children = tuple(dict.fromkeys(routers))
        return merged

    @property
    def routes(self) -> tuple[Route, ...]:
        """The routes registered here and in merged routers."""
        own = [route for route, _ in self._exact.values()] + [w[2] for w in self._wild]
        return tuple(own) + tuple(r for child in self._children for r in child.routes)

    def add(self, route: Route) -> None:
        """Serve ``route`` (replacing a stopped route on the same path).

        Raises:
            SubscribeError: A running route already serves that path.
        """
        base, pattern = route.base_path, route.subject
        taken = self._taken(base, pattern)
        if taken is not None:
            if taken.running:
                raise SubscribeError(
                    f"cannot serve {pattern!r} at {base}/{pattern}: already served there"
                )
            self.remove(taken)
        if is_wildcard(pattern):
            self._wild.append((base + "/", tuple(pattern.split(".")), route))
            self._wild.sort(key=_specificity)  # stable: equals keep the order they came in
        else:
            self._exact[f"{base}/{pattern}"] = (route, pattern)

    def _taken(self, base: str, pattern: str) -> Route | None:
        if not is_wildcard(pattern):
            found = self._exact.get(f"{base}/{pattern}")
            return None if found is None else found[0]
        tokens = tuple(pattern.split("."))
        for prefix, theirs, route in self._wild:
            if prefix == base + "/" and theirs == tokens:
                return route
        return None

    def remove(self, route: Route) -> None:
        """Stop serving ``route`` (its path answers 404 again)."""
        key = f"{route.base_path}/{route.subject}"
        if self._exact.get(key, (None,))[0] is route:
            del self._exact[key]
        self._wild = [w for w in self._wild if w[2] is not route]

    def _routers(self) -> list[Router]:
        """This router and every router merged into it, in lookup order."""
        found = [self]
        for child in self._children:
            found.extend(child._routers())
        return found

    def match(self, path: str) -> tuple[Route, str] | None:
        """The route serving ``path`` and the concrete subject, or None.

        A running route wins over a stopped one (which answers 503 only when no
        running route serves the path); exact paths before wildcards, in every
        merged router, and the most specific wildcard first.
        """
        routers = self._routers() if self._children else [self]
        stopped: tuple[Route, str] | None = None
        for router in routers:
            found = router._exact.get(path)
            if found is not None:
                if found[0].running:
                    return found
                stopped = stopped or found
        wild = [entry for router in routers for entry in router._wild]
        if len(routers) > 1:
            wild.sort(key=_specificity)
        subject: str | None = None
        for prefix, tokens, route in wild:
            if not path.startswith(prefix):
                continue
            subject = path[len(prefix) :]
            try:
                validate_subject(subject)
            except InvalidSubject:
                continue
            if tokens_match(tokens, subject.split(".")):
                if route.running:
                    return route, subject
                stopped = stopped or (route, subject)
        return stopped

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection: HTTP requests, and the lifespan protocol."""
        kind = scope["type"]
        if kind == "http":
            found = self.match(route_path(scope))
            if found is None:
                await send_error(scope, receive, send, 404, f"no route for {scope['path']}")
                return
            route, subject = found
            if scope["method"] != "POST":
                await send_error(
                    scope,
                    receive,
                    send,
                    405,
                    f"method {scope['method']} not allowed: POST a message to {scope['path']}",
                    {"allow": "POST"},
                )
                return
            await route.serve(scope, receive, send, subject)
        elif kind == "lifespan":  # served on its own: nothing to start or stop
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        elif kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})
