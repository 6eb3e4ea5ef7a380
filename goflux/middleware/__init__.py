"""Handler and publisher middleware: ack policies, retries, dead letters, timeouts, context.

Handler middleware wraps a ``Handler[T]``; compose it with :func:`goflux.chain`, where
the first given is the outermost (it sees the message first and the outcome last)::

    handler = chain(
        retry_ack(RetryPolicy(max_attempts=5, dead_letter=DeadLetter(dlq, "orders.dlq"))),
        timeout(30),
        message_context(),
    )(handle_order)

Publisher middleware wraps a ``Publisher[T]``; compose it with
:func:`goflux.chain_publishers` the same way::

    publisher = chain_publishers(forward_context(), retry_publish(attempts=5))(js_publisher)
"""

from goflux._backoff import (
    REDELIVERY_BACKOFF,
    Backoff,
    BackoffLike,
    ExponentialBackoff,
    FixedBackoff,
)
from goflux._compose.deadletter import DeadLetter, DeadLetterReason, dead_letter_headers
from goflux._exports import publish_names as _publish_names
from goflux._interfaces import GenericMiddleware, GenericPublisherMiddleware
from goflux.middleware._ack import auto_ack
from goflux.middleware._context import (
    current_headers,
    current_message,
    current_message_id,
    forward_context,
    message_context,
)
from goflux.middleware._publish import MAX_RETRY_AFTER, retry_publish
from goflux.middleware._retry import Decision, RetryPolicy, retry_ack
from goflux.middleware._timeout import timeout
from goflux.middleware._wrapping import WrappingPublisher

__all__ = (
    "MAX_RETRY_AFTER",
    "REDELIVERY_BACKOFF",
    "Backoff",
    "BackoffLike",
    "DeadLetter",
    "DeadLetterReason",
    "Decision",
    "ExponentialBackoff",
    "FixedBackoff",
    "GenericMiddleware",
    "GenericPublisherMiddleware",
    "RetryPolicy",
    "WrappingPublisher",
    "auto_ack",
    "current_headers",
    "current_message",
    "current_message_id",
    "dead_letter_headers",
    "forward_context",
    "message_context",
    "retry_ack",
    "retry_publish",
    "timeout",
)

_publish_names(__name__, globals())
