"""What a service speaks, as its group knows it: :class:`Endpoint` and :class:`About`."""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from goflux._headers import check_header_name

__all__ = (
    "About",
    "Endpoint",
    "HeaderDocs",
    "endpoint_name",
    "header_docs",
    "receiving",
    "summary_of",
)

_NOT_NAME = re.compile(r"[^A-Za-z0-9\-_]+")

HeaderDocs = Mapping[str, str] | Iterable[str]
"""User headers a service declares: names, or names with what each carries."""


@dataclass(frozen=True)
class Endpoint:
    """One subject a service receives on or sends to, as its group knows it.

    :attr:`goflux.Group.endpoints` lists them; ``goflux asyncapi`` turns them into
    channels and operations. Nothing here is started.

    Attributes:
        action: ``"receive"`` (a subscription, a processed stream, a responder) or
            ``"send"`` (a bound publisher or topic the group owns, or a publisher
            declared with :meth:`goflux.Group.sends`).
        subject: The subject, or a pattern with wildcards.
        via: The subscriber, stream, responder or publisher doing it.
        member: The member's name (``"subscription to 'orders.>'"``); for sends, the
            publisher's description.
        reply: True for a responder: each request gets a reply.
        headers: User headers declared for it (name -> what it carries).
        description: What it is for (given, or the handler's docstring's first line).
        name: A responder's micro service endpoint name, if given.
    """

    action: Literal["receive", "send"]
    subject: str
    via: object
    member: str
    reply: bool = False
    headers: Mapping[str, str] = field(default_factory=dict)
    description: str | None = None
    name: str | None = None


@dataclass(frozen=True)
class About:
    """A service's title, version and description, for documents that describe it.

    Set with :meth:`goflux.Group.describe`; None fields are left to the tool (the
    AsyncAPI command uses the service function's name and docstring, and ``0.0.0``).
    """

    title: str | None = None
    version: str | None = None
    description: str | None = None


def header_docs(headers: HeaderDocs | None) -> dict[str, str]:
    """Declared user headers as name -> description (empty for names given bare).

    Raises:
        InvalidHeader: A name is not a valid header name.
        TypeError: ``headers`` is one string rather than names or a mapping.
    """
    if headers is None:
        return {}
    if isinstance(headers, str):
        raise TypeError(f"headers must be names or a mapping of names, not a string: {headers!r}")
    pairs = headers.items() if isinstance(headers, Mapping) else ((name, "") for name in headers)
    return {check_header_name(name): str(description) for name, description in pairs}


def summary_of(fn: object) -> str | None:
    """The first paragraph of ``fn``'s docstring on one line (None without one)."""
    while isinstance(fn, functools.partial):
        fn = fn.func
    doc = getattr(fn, "__doc__", None)
    if not isinstance(doc, str) or not doc.strip():
        return None
    paragraph = doc.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


def receiving(
    subject: str,
    via: object,
    member: str,
    handler: object,
    *,
    headers: HeaderDocs | None,
    description: str | None,
    reply: bool = False,
    name: str | None = None,
) -> Endpoint:
    """A ``receive`` endpoint, described by ``description`` or else ``handler``'s docstring.

    Raises:
        InvalidHeader: A declared header name is invalid.
    """
    return Endpoint(
        "receive",
        subject,
        via,
        member,
        reply=reply,
        headers=header_docs(headers),
        description=description or summary_of(handler),
        name=name,
    )


def endpoint_name(subject: str) -> str:
    """The endpoint name derived from ``subject``: runs of other characters become ``-``.

    ``pricing.quote`` becomes ``pricing-quote``; wildcard tokens fall away
    (``orders.*.created`` becomes ``orders-created``).

    Raises:
        ValueError: Nothing is left to name the endpoint by (``>``).
    """
    name = _NOT_NAME.sub("-", subject).strip("-")
    if not name:
        raise ValueError(f"cannot name an endpoint after subject {subject!r}: pass endpoint=")
    return name
