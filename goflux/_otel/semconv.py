"""Names goflux's telemetry records under: attribute keys, metric names, bucket advice.

Each constant is named after its value, so a key never shares a name with a value:
``MESSAGING_SYSTEM`` is the key ``messaging.system``; what a transport reports under it
is that transport's ``SYSTEM`` (``nats-jetstream``, ``nats``, ``http``, ``go_channel``:
Go goflux's values). Keys follow the OpenTelemetry messaging semantic conventions;
goflux's own start with ``goflux.``, and those Go goflux records too have Go's names.
"""

from __future__ import annotations

from typing import Final

__all__ = (
    "ACK_ACTIONS",
    "DURATION_BUCKETS",
    "ERROR_TYPE",
    "GOFLUX_ACK_ACTION",
    "GOFLUX_ACK_ERROR",
    "GOFLUX_CONSUMER_DEAD_LETTERS",
    "GOFLUX_CONSUMER_DROPPED",
    "GOFLUX_CONSUMER_LAG",
    "GOFLUX_CONSUMER_PENDING",
    "GOFLUX_CONSUMER_REDELIVERIES",
    "GOFLUX_CONSUMER_SETTLEMENTS",
    "GOFLUX_DEAD_LETTER_REASON",
    "GOFLUX_PROCESSOR_ACK_OUTCOME",
    "GOFLUX_REPLY_BODY_SIZE",
    "GOFLUX_REPLY_SUBJECT",
    "GOFLUX_SETTLEMENT_OUTCOME",
    "HTTP_REQUEST_METHOD",
    "HTTP_RESPONSE_STATUS_CODE",
    "MESSAGING_CLIENT_CONSUMED_MESSAGES",
    "MESSAGING_CLIENT_OPERATION_DURATION",
    "MESSAGING_CLIENT_SENT_MESSAGES",
    "MESSAGING_CONSUMER_GROUP_NAME",
    "MESSAGING_DESTINATION_NAME",
    "MESSAGING_DESTINATION_TEMPLATE",
    "MESSAGING_MESSAGE_BODY_SIZE",
    "MESSAGING_MESSAGE_ID",
    "MESSAGING_NATS_DELIVERY_COUNT",
    "MESSAGING_NATS_STREAM",
    "MESSAGING_NATS_STREAM_SEQUENCE",
    "MESSAGING_OPERATION_NAME",
    "MESSAGING_OPERATION_TYPE",
    "MESSAGING_PROCESS_DURATION",
    "MESSAGING_SYSTEM",
    "SERVER_ADDRESS",
    "SERVER_PORT",
    "URL_FULL",
    "URL_PATH",
    "error_type",
)

# ------------------------------------------------------------ attribute keys

MESSAGING_SYSTEM: Final = "messaging.system"
MESSAGING_OPERATION_NAME: Final = "messaging.operation.name"
MESSAGING_OPERATION_TYPE: Final = "messaging.operation.type"
MESSAGING_DESTINATION_NAME: Final = "messaging.destination.name"
MESSAGING_DESTINATION_TEMPLATE: Final = "messaging.destination.template"
MESSAGING_MESSAGE_ID: Final = "messaging.message.id"
MESSAGING_CONSUMER_GROUP_NAME: Final = "messaging.consumer.group.name"
MESSAGING_MESSAGE_BODY_SIZE: Final = "messaging.message.body.size"
MESSAGING_NATS_STREAM: Final = "messaging.nats.stream"
MESSAGING_NATS_STREAM_SEQUENCE: Final = "messaging.nats.stream.sequence"
MESSAGING_NATS_DELIVERY_COUNT: Final = "messaging.nats.delivery.count"
ERROR_TYPE: Final = "error.type"
SERVER_ADDRESS: Final = "server.address"
SERVER_PORT: Final = "server.port"
GOFLUX_SETTLEMENT_OUTCOME: Final = "goflux.settlement.outcome"
GOFLUX_DEAD_LETTER_REASON: Final = "goflux.dead_letter.reason"
GOFLUX_REPLY_BODY_SIZE: Final = "goflux.reply.body.size"  # Go goflux's, on request spans
GOFLUX_REPLY_SUBJECT: Final = "goflux.reply.subject"  # Go goflux's: where a reply arrived
GOFLUX_ACK_ACTION: Final = "goflux.ack.action"  # Go goflux's: ack, nak, nak_with_delay, term
GOFLUX_ACK_ERROR: Final = "goflux.ack.error"  # Go goflux's: the settlement itself failed
HTTP_REQUEST_METHOD: Final = "http.request.method"
HTTP_RESPONSE_STATUS_CODE: Final = "http.response.status_code"
URL_FULL: Final = "url.full"
URL_PATH: Final = "url.path"

# -------------------------------------------------------------- metric names

MESSAGING_CLIENT_SENT_MESSAGES: Final = "messaging.client.sent.messages"
MESSAGING_CLIENT_CONSUMED_MESSAGES: Final = "messaging.client.consumed.messages"
MESSAGING_CLIENT_OPERATION_DURATION: Final = "messaging.client.operation.duration"
MESSAGING_PROCESS_DURATION: Final = "messaging.process.duration"
GOFLUX_PROCESSOR_ACK_OUTCOME: Final = "goflux.processor.ack.outcome"  # Go goflux's
GOFLUX_CONSUMER_LAG: Final = "goflux.consumer.lag"  # Go goflux's (an observable gauge)
GOFLUX_CONSUMER_PENDING: Final = "goflux.consumer.pending"  # JetStream's num_pending
GOFLUX_CONSUMER_SETTLEMENTS: Final = "goflux.consumer.settlements"  # deprecated: ack.outcome
GOFLUX_CONSUMER_REDELIVERIES: Final = "goflux.consumer.redeliveries"
GOFLUX_CONSUMER_DROPPED: Final = "goflux.consumer.dropped"
GOFLUX_CONSUMER_DEAD_LETTERS: Final = "goflux.consumer.dead_letters"

ACK_ACTIONS: Final = ("ack", "nak", "nak_with_delay", "term")
"""The values of ``goflux.ack.action``, as Go goflux records them."""

DURATION_BUCKETS: Final[tuple[float, ...]] = (
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
"""Histogram bucket boundaries advised by the messaging semantic conventions."""


def error_type(exc: BaseException) -> str:
    """Return the ``error.type`` value for an exception: its fully qualified class name."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
