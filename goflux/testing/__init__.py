"""Test and demo helpers: real NATS servers on loopback, and a pytest plugin.

``goflux.testing.pytest_plugin`` is registered automatically when goflux is installed
and provides the ``nats_server`` and ``nats_url`` fixtures.
"""

from goflux.testing._cluster import NatsCluster
from goflux.testing._server import NatsServer, NatsServerError, NatsServerNotFound, find_nats_server

__all__ = (
    "NatsCluster",
    "NatsServer",
    "NatsServerError",
    "NatsServerNotFound",
    "find_nats_server",
)
