"""Describe a service as an AsyncAPI 3.0 document: ``goflux asyncapi MODULE:ATTR``.

:func:`describe_service` calls a service function with a fresh
:class:`~goflux.Group` and starts nothing; :func:`asyncapi_document` turns a group's
:attr:`~goflux.Group.endpoints` into channels, operations, messages with pydantic
payload schemas, and servers. :func:`asyncapi_html` and :func:`asyncapi_app` show the
document in a browser with AsyncAPI's React component.
"""

from goflux._exports import publish_names as _publish_names
from goflux.asyncapi._build import AsyncAPI, DescribeError, asyncapi_document, describe_service
from goflux.asyncapi._document import ASYNCAPI_VERSION, Skipped
from goflux.asyncapi._html import RENDERER, asyncapi_app, asyncapi_html

__all__ = (
    "ASYNCAPI_VERSION",
    "RENDERER",
    "AsyncAPI",
    "DescribeError",
    "Skipped",
    "asyncapi_app",
    "asyncapi_document",
    "asyncapi_html",
    "describe_service",
)

_publish_names(__name__, globals())
