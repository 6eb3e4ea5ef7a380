"""Build the AsyncAPI 3.0 document of a group: :func:`build_document`."""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from goflux._compose.endpoints import Endpoint, endpoint_name
from goflux._facts import Facts, facts_of
from goflux._subject_template import template_of
from goflux._wire import MESSAGE_ID_HEADER, NATS_MSG_ID_HEADER, USER_HEADER_PREFIX
from goflux.asyncapi._http import (
    HTTP_ERROR_MESSAGE,
    HttpServers,
    message_binding,
    operation_binding,
)
from goflux.asyncapi._parameters import template_address
from goflux.asyncapi._payloads import Mode, Payload, PayloadSchemas, component_key, payload_of
from goflux.asyncapi._servers import Servers, security_schemes

__all__ = ("ASYNCAPI_VERSION", "Skipped", "build_document")

ASYNCAPI_VERSION = "3.0.0"
_NATS_BINDING_VERSION = "0.1.0"
_ERROR_HEADER = "Nats-Service-Error"
_ERROR_CODE_HEADER = "Nats-Service-Error-Code"

_TRACE_HEADERS: dict[str, Any] = {
    "traceparent": {
        "type": "string",
        "description": "W3C trace context of the publisher's span (when tracing is on).",
    },
    "tracestate": {"type": "string", "description": "W3C trace state (when tracing is on)."},
}
_STANDARD_HEADERS: dict[str, Any] = {
    "goflux.Headers": {
        "type": "object",
        "description": "Headers goflux writes on every message (Go goflux's wire format).",
        "properties": {
            MESSAGE_ID_HEADER: {
                "type": "string",
                "description": "The message ID, when the publisher gives one.",
            },
            **_TRACE_HEADERS,
        },
    },
    "goflux.JetStreamHeaders": {
        "type": "object",
        "description": "goflux's headers on a JetStream message.",
        "allOf": [{"$ref": "#/components/schemas/goflux.Headers"}],
        "properties": {
            NATS_MSG_ID_HEADER: {
                "type": "string",
                "description": "The message ID again: the stream stores a message once per ID "
                "within its duplicate window.",
            },
        },
    },
    "goflux.ServiceErrorHeaders": {
        "type": "object",
        "description": "An error reply: the request failed (the body is empty).",
        "required": [_ERROR_HEADER, _ERROR_CODE_HEADER],
        "properties": {
            _ERROR_HEADER: {"type": "string", "description": "What went wrong."},
            _ERROR_CODE_HEADER: {
                "type": "string",
                "pattern": "^[0-9]+$",
                "description": "400: the request could not be decoded; 500: the handler "
                "failed; 503: the responder is stopping; or the handler's own code.",
            },
            MESSAGE_ID_HEADER: {"type": "string", "description": "The request's message ID."},
        },
    },
}
_CORRELATION_IDS = {
    "messageId": {
        "description": "The request's message ID, repeated on its reply.",
        "location": f"$message.header#/{MESSAGE_ID_HEADER}",
    },
}
_SERVICE_ERROR_MESSAGE = {
    "name": "ServiceError",
    "title": "Error reply",
    "summary": "The reply when the request failed: error headers, empty body.",
    "headers": {"$ref": "#/components/schemas/goflux.ServiceErrorHeaders"},
    "payload": {"type": "string", "maxLength": 0},
    "correlationId": {"$ref": "#/components/correlationIds/messageId"},
}


@dataclass(frozen=True)
class Skipped:
    """An endpoint left out of the document, and why.

    Attributes:
        member: The member or publisher (``"subscription to 'orders.>'"``).
        reason: Why (an in-process channel, or an object that does not describe itself).
    """

    member: str
    reason: str


@dataclass(frozen=True)
class _Message:
    """A message variant: its payload, and which headers and correlation it carries.

    ``http`` marks a message on the HTTP transport (it gets HTTP's message binding);
    ``status`` is the status of an HTTP reply.
    """

    payload: Payload
    jetstream: bool
    headers: tuple[tuple[str, str], ...]
    correlated: bool
    http: bool = False
    status: int | None = None


_ERROR_VARIANT = "ServiceError"
_HTTP_ERROR_VARIANT = "HttpError"


@dataclass(frozen=True)
class _Ref:
    """A message of a channel, named once every message is known."""

    channel: str
    message: _Message | str


@dataclass
class _Channel:
    key: str
    subject: str | None
    path: str | None = None  # on HTTP: the path before the subject ("" or "/a/b")
    http_server: str | None = None  # on HTTP: the key of its server
    messages: list[_Message | str] = field(default_factory=list)  # variants, in order
    hosts: list[str] = field(default_factory=list)  # NATS servers
    description: str | None = None


def _address(subject: str) -> tuple[str, dict[str, Any]]:
    """A NATS subject as an AsyncAPI address: wildcards become parameters.

    A :class:`goflux.SubjectTemplate`'s pattern is the template's text, its
    placeholders the parameters, typed.
    """
    template = template_of(subject)
    if template is not None:
        return template_address(template)
    tokens: list[str] = []
    parameters: dict[str, Any] = {}
    for position, token in enumerate(subject.split("."), start=1):
        if token == "*":
            name = f"token{position}"
            parameters[name] = {
                "description": f"Token {position} of the subject: any one token "
                "(the NATS wildcard *)."
            }
            tokens.append("{" + name + "}")
        elif token == ">":
            parameters["tail"] = {
                "description": f"Tokens {position} and on: one or more tokens, dots "
                "included (the NATS wildcard >)."
            }
            tokens.append("{tail}")
        else:
            tokens.append(token)
    return ".".join(tokens), parameters


def _plain(value: object) -> object:
    """A JSON value for ``value`` (enums as their values)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Mapping):
        return {str(key): _plain(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


class _Builder:
    def __init__(self) -> None:
        self.servers = Servers()
        self.http_servers = HttpServers()
        self.schemas = PayloadSchemas()
        self.channels: dict[str, _Channel] = {}
        # (server, path, subject, template) -> channel key: two templates with one
        # pattern (orders.{region}.created, orders.{customer}.created) are two channels
        self._channel_of_subject: dict[tuple[object, ...], str] = {}
        self.variants: list[_Message] = []
        self.operations: dict[str, dict[str, Any]] = {}
        self.skipped: list[Skipped] = []
        self.uses_errors = False
        self.uses_http_errors = False
        # a plain pattern -> the pattern of the one SubjectTemplate that has it (none when
        # two templates share the pattern: which one a plain subscription means is unknown)
        self.templated: dict[str, str] = {}

    def _unique(self, taken: Mapping[str, object], key: str) -> str:
        if key not in taken:
            return key
        n = 2
        while f"{key}-{n}" in taken:
            n += 1
        return f"{key}-{n}"

    def channel(self, subject: str, http: tuple[str, str] | None = None) -> _Channel:
        """The channel of ``subject``.

        On HTTP (``http`` is the server's key and the path), the channel of the path
        ``{path}/{subject}`` on that server.
        """
        if template_of(subject) is None:
            # a pattern some endpoint uses with its template: the template's channel
            subject = self.templated.get(subject, subject)
        where = (None, None) if http is None else http
        found = (*where, str.__str__(subject), template_of(subject))
        key = self._channel_of_subject.get(found)
        if key is None:
            address, _ = _address(subject)
            name = address.replace("{", "").replace("}", "")
            if http is not None:
                name = f"{http[0]}{http[1]}/{name}".replace("/", ".")
            key = self._unique(self.channels, component_key(name))
            server, path = (None, None) if http is None else http
            self.channels[key] = _Channel(key, subject, path, server)
            self._channel_of_subject[found] = key
        return self.channels[key]

    def reply_channel(self, request: _Channel) -> _Channel:
        key = self._unique(self.channels, f"{request.key}.reply")
        if request.path is None:
            description = f"The reply subject (an inbox) of a request on {request.subject}."
        else:
            description = f"The HTTP response to a request on {request.path}/{request.subject}."
        channel = _Channel(key, None, http_server=request.http_server, description=description)
        self.channels[key] = channel
        return channel

    def message(self, channel: _Channel, variant: _Message | str) -> _Ref:
        if isinstance(variant, _Message) and variant not in self.variants:
            self.variants.append(variant)
            self.schemas.add(variant.payload)
        if variant not in channel.messages:
            channel.messages.append(variant)
        return _Ref(channel.key, variant)

    def add(self, endpoint: Endpoint) -> None:
        facts = facts_of(endpoint.via)
        if facts is None:
            self.skipped.append(Skipped(endpoint.member, "it does not describe itself"))
            return
        if facts.transport == "channel":
            self.skipped.append(Skipped(endpoint.member, "an in-process channel, not on NATS"))
            return
        sent = endpoint.action == "send"
        mode: Mode = "serialization" if sent else "validation"
        jetstream = facts.transport == "jetstream"
        http = facts.transport == "http"
        # a responder replies; a requester (a send with a reply codec) is replied to
        replies = endpoint.reply or (sent and facts.reply_codec is not None)
        headers = tuple(sorted(endpoint.headers.items()))
        payload = payload_of(facts.codec, mode)
        variant = _Message(payload, jetstream, headers, replies, http=http)
        hosts: list[str] = []
        if http:
            where = self.http_servers.remote if sent else self.http_servers.served
            channel = self.channel(endpoint.subject, where(facts.http))
        else:
            hosts = self.servers.add(facts.client)
            channel = self.channel(endpoint.subject)
            channel.hosts.extend(host for host in hosts if host not in channel.hosts)
        operation: dict[str, Any] = {
            "action": endpoint.action,
            "channel": {"$ref": f"#/channels/{channel.key}"},
            "title": endpoint.member,
        }
        if endpoint.description:
            operation["description"] = endpoint.description
        operation["messages"] = [self.message(channel, variant)]
        if http:
            operation["bindings"] = {"http": operation_binding(facts.http, served=not sent)}
        else:
            bindings = self._bindings(facts, endpoint)
            if bindings:
                operation["bindings"] = {"nats": bindings}
        if replies:
            operation["reply"] = self._reply(channel, facts, hosts, sent)
        key = self._unique(self.operations, f"{endpoint.action}.{channel.key}")
        self.operations[key] = operation

    def _bindings(self, facts: Facts, endpoint: Endpoint) -> dict[str, Any]:
        bindings: dict[str, Any] = {}
        if facts.queue:
            bindings["queue"] = facts.queue
        if facts.jetstream:
            bindings["x-jetstream"] = _plain(facts.jetstream)
        if facts.micro:
            micro = dict(facts.micro)
            with contextlib.suppress(ValueError):  # no name to derive: the start fails too
                micro["endpoint"] = endpoint.name or endpoint_name(endpoint.subject)
            bindings["x-nats-micro"] = _plain(micro)
        if bindings:
            bindings["bindingVersion"] = _NATS_BINDING_VERSION
        return bindings

    def _reply(
        self, request: _Channel, facts: Facts, hosts: list[str], sent: bool
    ) -> dict[str, Any]:
        """The reply of a responder (written) or of a requester's request (read)."""
        channel = self.reply_channel(request)
        channel.hosts.extend(hosts)
        http = facts.transport == "http"
        mode: Mode = "validation" if sent else "serialization"
        payload = payload_of(facts.reply_codec, mode)
        variant = _Message(payload, False, (), True, http=http, status=200 if http else None)
        if http:
            self.uses_http_errors = True
            error = _HTTP_ERROR_VARIANT
        else:
            self.uses_errors = True
            error = _ERROR_VARIANT
        return {
            "channel": {"$ref": f"#/channels/{channel.key}"},
            "messages": [self.message(channel, variant), self.message(channel, error)],
        }

    # ------------------------------------------------------------ output

    def _headers(self, variant: _Message) -> dict[str, Any]:
        standard = {
            "$ref": "#/components/schemas/"
            + ("goflux.JetStreamHeaders" if variant.jetstream else "goflux.Headers")
        }
        if not variant.headers:
            return standard
        declared = {
            f"{USER_HEADER_PREFIX}{name}": {
                "type": "string",
                "description": description or f"The user header {name!r} (goflux).",
            }
            for name, description in variant.headers
        }
        return {"type": "object", "allOf": [standard], "properties": declared}

    def _messages(self) -> tuple[dict[str, Any], dict[_Message | str, str], dict[str, Any]]:
        """The message components, each variant's component key, and the payload schemas.

        Variants that come out the same (a model's schema is often the same read and
        written) share one component; names are the payload's, then ``-2``, ``-3``...
        """
        resolved, component_schemas = self.schemas.resolve()
        for name, why in self.schemas.failures:
            self.skipped.append(Skipped(f"the schema of payload {name!r}", why))
        messages: dict[str, Any] = {}
        keys: dict[_Message | str, str] = {}
        for variant in self.variants:
            payload = variant.payload
            body: dict[str, Any] = {"title": payload.name}
            if payload.content_type is not None:
                body["contentType"] = payload.content_type
            body["headers"] = self._headers(variant)
            body["payload"] = self.schemas.schema_of(payload, resolved)
            if variant.correlated:
                body["correlationId"] = {"$ref": "#/components/correlationIds/messageId"}
            if variant.http:
                body["bindings"] = {
                    "http": message_binding(
                        payload.content_type, body["headers"], status=variant.status
                    )
                }
            same = next((key for key, seen in messages.items() if _body(seen) == body), None)
            if same is None:
                taken = {**messages, _ERROR_VARIANT: None, _HTTP_ERROR_VARIANT: None}
                same = self._unique(taken, component_key(payload.name))
                messages[same] = {"name": same, **body}
            keys[variant] = same
        if self.uses_errors:
            messages[_ERROR_VARIANT] = _SERVICE_ERROR_MESSAGE
            keys[_ERROR_VARIANT] = _ERROR_VARIANT
        if self.uses_http_errors:
            messages[_HTTP_ERROR_VARIANT] = HTTP_ERROR_MESSAGE
            keys[_HTTP_ERROR_VARIANT] = _HTTP_ERROR_VARIANT
        return messages, keys, component_schemas

    def _channels(self, keys: dict[_Message | str, str]) -> dict[str, Any]:
        channels: dict[str, Any] = {}
        for channel in self.channels.values():
            entry: dict[str, Any] = {}
            if channel.subject is None:
                entry["address"] = None
            else:
                address, parameters = _address(channel.subject)
                entry["address"] = address if channel.path is None else f"{channel.path}/{address}"
                if parameters:
                    entry["parameters"] = parameters
            if channel.description:
                entry["description"] = channel.description
            named = dict.fromkeys(keys[variant] for variant in channel.messages)
            entry["messages"] = {key: {"$ref": f"#/components/messages/{key}"} for key in named}
            servers = [self.servers.key(host) for host in channel.hosts]
            if channel.http_server is not None:
                servers.append(channel.http_server)
            if servers:
                entry["servers"] = [{"$ref": f"#/servers/{key}"} for key in servers]
            channels[channel.key] = entry
        return channels

    def _operations(self, keys: dict[_Message | str, str]) -> dict[str, Any]:
        def named(refs: list[_Ref]) -> list[dict[str, str]]:
            found = dict.fromkeys(
                f"#/channels/{ref.channel}/messages/{keys[ref.message]}" for ref in refs
            )
            return [{"$ref": ref} for ref in found]

        operations: dict[str, Any] = {}
        for key, operation in self.operations.items():
            done = {**operation, "messages": named(operation["messages"])}
            if "reply" in operation:
                reply = operation["reply"]
                done["reply"] = {**reply, "messages": named(reply["messages"])}
            operations[key] = done
        return operations

    def document(self, info: dict[str, Any]) -> dict[str, Any]:
        messages, keys, component_schemas = self._messages()
        servers, security = self.servers.document()
        servers.update(self.http_servers.document())
        headers = dict(_STANDARD_HEADERS)
        if not self.uses_errors:
            del headers["goflux.ServiceErrorHeaders"]
        components: dict[str, Any] = {"schemas": {**headers, **component_schemas}}
        if messages:
            components["messages"] = messages
        if security:
            components["securitySchemes"] = security_schemes(security)
        if self.uses_errors or self.uses_http_errors:
            components["correlationIds"] = _CORRELATION_IDS
        document: dict[str, Any] = {"asyncapi": ASYNCAPI_VERSION, "info": info}
        document["defaultContentType"] = "application/json"
        if servers:
            document["servers"] = servers
        document["channels"] = self._channels(keys)
        document["operations"] = self._operations(keys)
        document["components"] = components
        return document


def _body(message: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in message.items() if key != "name"}


def build_document(
    endpoints: tuple[Endpoint, ...],
    *,
    title: str,
    version: str,
    description: str | None,
) -> tuple[dict[str, Any], tuple[Skipped, ...]]:
    """The AsyncAPI 3.0 document of ``endpoints``, and the endpoints it leaves out."""
    builder = _Builder()
    templates: dict[str, dict[object, str]] = {}  # pattern -> its templates' patterns
    for endpoint in endpoints:
        template = template_of(endpoint.subject)
        if template is not None:
            templates.setdefault(str.__str__(endpoint.subject), {})[template] = endpoint.subject
    builder.templated = {
        pattern: next(iter(patterns.values()))
        for pattern, patterns in templates.items()
        if len(patterns) == 1
    }
    for endpoint in endpoints:
        builder.add(endpoint)
    info: dict[str, Any] = {"title": title, "version": version}
    if description:
        info["description"] = description
    return builder.document(info), tuple(builder.skipped)
