"""A group's HTTP routes as one ASGI app: :func:`app_of`."""

from __future__ import annotations

from goflux._compose.group import Group
from goflux._errors import SubscribeError
from goflux._facts import facts_of
from goflux.transports.http._router import Router

__all__ = ("app_of",)


def app_of(group: Group) -> Router | None:
    """The ASGI app serving the HTTP routes of ``group``'s members; None without any.

    Every HTTP subscriber and responder the group runs (``group.subscribe``,
    ``group.respond``, ``group.process`` of its stream, bound or wrapped) serves its
    routes on its router (its ``app``). This is that router, or, when the members
    use several, one app serving the routes of all (:meth:`Router.merged`).
    ``goflux run --http-port`` serves it, and
    :attr:`goflux.asgi.ServiceLifespan.http` mounts it in an ASGI app.

    The routes are registered when the group starts: until then the app answers
    404, from the drain on 503 (a stopped route's answer). Serve it only once the
    group runs, as ``goflux run`` and ``ServiceLifespan`` do.

    Raises:
        SubscribeError: Members on different routers would serve the same path
            (the first router would answer, the other member would never be reached).
    """
    routers: dict[int, Router] = {}
    served: dict[str, tuple[Router, str]] = {}  # path -> its router and member
    for endpoint in group.endpoints:
        facts = facts_of(endpoint.via)
        if endpoint.action != "receive" or facts is None or facts.transport != "http":
            continue
        router = facts.app
        if not isinstance(router, Router):
            continue  # an HTTP implementation of the user's own: it serves itself
        routers.setdefault(id(router), router)
        path = f"{facts.http.get('basePath', '')}/{endpoint.subject}"
        taken = served.setdefault(path, (router, endpoint.member))
        if taken[0] is not router:
            raise SubscribeError(
                f"cannot serve {endpoint.member} at POST {path}: {taken[1]} serves it "
                "on another router (give both the same router=, or another base_path)"
            )
    if not routers:
        return None
    found = tuple(routers.values())
    return found[0] if len(found) == 1 else Router.merged(*found)
