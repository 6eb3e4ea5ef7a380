"""Transports implementing the goflux interfaces.

Import them module-qualified, as in Go::

    from goflux.transports import channel, jetstream, nats as gnats

Each lives in its own subpackage and imports its optional dependency (nats-py,
pyspark) only when imported itself.
"""

__all__ = ()
