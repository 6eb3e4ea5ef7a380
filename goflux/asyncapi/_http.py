"""HTTP members in an AsyncAPI document: AsyncAPI's HTTP bindings (0.3.0) and servers.

A member on the HTTP transport is a route ``POST {base_path}/{subject}`` (subscribers,
responders) or an endpoint it posts to, ``POST {base_url}/{subject}`` (publishers,
requesters). Its channel's address is that path; its operation's binding says
``POST``; its messages' bindings give the HTTP headers and, for a reply, the status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from goflux._wire import MESSAGE_ID_HEADER
from goflux.asyncapi._payloads import component_key

__all__ = (
    "HTTP_BINDING_VERSION",
    "HTTP_ERROR_MESSAGE",
    "SERVED",
    "HttpServers",
    "message_binding",
    "operation_binding",
)

HTTP_BINDING_VERSION = "0.3.0"
SERVED = "http"
"""The key of the server standing for the service's own routes."""

_ERROR_CONTENT_TYPE = "text/plain; charset=utf-8"

HTTP_ERROR_MESSAGE: dict[str, Any] = {
    "name": "HttpError",
    "title": "Error answer",
    "summary": "The answer when the request failed: a 4xx or 5xx status, one line of text.",
    "description": "400: the request does not decode; 404: no route for the path; 408: the "
    "body did not arrive in time; 413: the body is too large; 415: the body came with a "
    "`Content-Encoding` other than identity (`Accept-Encoding: identity`); 500: the "
    "handler failed; "
    "503: the route is stopping (`Retry-After`); or the status of the handler's "
    "`ServiceError`, with its message.",
    "contentType": _ERROR_CONTENT_TYPE,
    "payload": {"type": "string", "description": "What went wrong, one line."},
    "correlationId": {"$ref": "#/components/correlationIds/messageId"},
    "bindings": {
        "http": {
            "headers": {
                "type": "object",
                "properties": {
                    "Content-Type": {"type": "string", "enum": [_ERROR_CONTENT_TYPE]},
                    "X-Content-Type-Options": {"type": "string", "enum": ["nosniff"]},
                    MESSAGE_ID_HEADER: {
                        "type": "string",
                        "description": "The request's message ID.",
                    },
                    "Retry-After": {
                        "type": "string",
                        "description": "Seconds to wait before sending again (503).",
                    },
                    "Accept-Encoding": {
                        "type": "string",
                        "enum": ["identity"],
                        "description": "The only content coding taken (415).",
                    },
                },
            },
            "bindingVersion": HTTP_BINDING_VERSION,
        }
    },
}


def operation_binding(http: Mapping[str, object], *, served: bool) -> dict[str, Any]:
    """The HTTP operation binding: ``POST``, and the body limit of a route served."""
    binding: dict[str, Any] = {"method": "POST"}
    limit = http.get("maxBodySize")
    if served and isinstance(limit, int):
        binding["x-max-body-size"] = limit
    binding["bindingVersion"] = HTTP_BINDING_VERSION
    return binding


def message_binding(
    content_type: str | None, headers: Mapping[str, Any], *, status: int | None
) -> dict[str, Any]:
    """The HTTP message binding: the request's or reply's headers, and a reply's status.

    ``headers`` is the message's own headers schema (goflux's and the declared ones);
    the binding adds ``Content-Type``.
    """
    binding: dict[str, Any] = {}
    if status is not None:
        binding["statusCode"] = status
    properties: dict[str, Any] = {}
    if content_type is not None:
        properties["Content-Type"] = {"type": "string", "enum": [content_type]}
    schema: dict[str, Any] = {"type": "object"}
    if "$ref" in headers:
        schema["allOf"] = [dict(headers)]
    else:
        schema.update({key: value for key, value in headers.items() if key != "properties"})
        properties.update(headers.get("properties", {}))
    schema["properties"] = properties
    binding["headers"] = schema
    binding["bindingVersion"] = HTTP_BINDING_VERSION
    return binding


@dataclass
class _Remote:
    host: str
    protocol: str


class HttpServers:
    """The HTTP servers of a document: the service's own routes, and endpoints posted to.

    The routes' server (:data:`SERVED`) has a variable host: a subscriber or responder
    owns no listener, so where it is served is decided when it runs. An endpoint a
    publisher or requester posts to is a server of its own, named after its scheme
    and host (``https.pricing.internal``).
    """

    def __init__(self) -> None:
        self._served = False
        self._remote: dict[str, _Remote] = {}

    def served(self, http: Mapping[str, object]) -> tuple[str, str]:
        """The server key and the path prefix of a subscriber's or responder's routes."""
        self._served = True
        base = http.get("basePath")
        return SERVED, base if isinstance(base, str) else ""

    def remote(self, http: Mapping[str, object]) -> tuple[str, str]:
        """The server key and the path prefix of the endpoint a publisher posts to."""
        parts = urlsplit(str(http.get("baseUrl", "")))
        name = parts.hostname or ""
        if ":" in name:
            name = f"[{name}]"
        host = name if parts.port is None else f"{name}:{parts.port}"
        key = component_key(f"{parts.scheme}.{host}")
        self._remote.setdefault(key, _Remote(host, parts.scheme))
        return key, parts.path.rstrip("/")

    def document(self) -> dict[str, Any]:
        """The ``servers`` entries, the routes' first."""
        servers: dict[str, Any] = {}
        if self._served:
            servers[SERVED] = {
                "host": "{host}",
                "protocol": "http",
                "description": "This service's HTTP routes, wherever they are served "
                "(`goflux run --http-port`, an ASGI server, an app they are mounted in: "
                "its mount path goes before each address).",
                "variables": {
                    "host": {
                        "description": "The host and port the routes are served on.",
                        "examples": ["localhost:8080"],
                    }
                },
            }
        for key, remote in self._remote.items():
            servers[key] = {
                "host": remote.host,
                "protocol": remote.protocol,
                "description": "An HTTP endpoint this service posts to"
                + (" (TLS)" if remote.protocol == "https" else "")
                + ".",
            }
        return servers
