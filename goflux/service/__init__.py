"""Run a service: ``goflux run MODULE:ATTR`` and its parts (needs ``goflux[service]``).

A service is an async function that takes a :class:`~goflux.Group` and fills it
(:data:`Service`). :func:`run_service` runs it until SIGTERM/SIGINT in this process,
or in several worker processes under a supervisor that restarts those that die, with
health probes (``/livez``, ``/readyz``), the group's HTTP routes on a port the workers
share (``RunOptions.http_port``) and structured log lines.
"""

from goflux._exports import publish_names as _publish_names
from goflux.service._health import HealthReport, health_app
from goflux.service._load import Service, ServiceLoadError, load_service
from goflux.service._logs import LogFormat, configure_logging
from goflux.service._options import RunOptions
from goflux.service._run import run_service
from goflux.service._worker import EXIT_BAD_SERVICE, EXIT_FAILED

__all__ = (
    "EXIT_BAD_SERVICE",
    "EXIT_FAILED",
    "HealthReport",
    "LogFormat",
    "RunOptions",
    "Service",
    "ServiceLoadError",
    "configure_logging",
    "health_app",
    "load_service",
    "run_service",
)

_publish_names(__name__, globals())
