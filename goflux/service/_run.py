"""Choose how to run a service: in this process, or under a supervisor."""

from __future__ import annotations

import logging
import os

from goflux.service._logs import configure_logging
from goflux.service._open_files import raise_open_files_limit
from goflux.service._options import RunOptions
from goflux.service._supervisor import run_supervisor
from goflux.service._worker import run_worker

__all__ = ("run_service",)

logger = logging.getLogger("goflux.run")


def run_service(
    spec: str,
    options: RunOptions | None = None,
    *,
    worker_id: int | None = None,
    status_fd: int | None = None,
    http_fd: int | None = None,
) -> int:
    """Run the service ``MODULE:ATTR`` as ``goflux run`` does; return the exit status.

    With one worker and no reload, the service runs in this process (worker 1).
    Otherwise a supervisor runs ``options.workers`` worker processes. Logging is set
    up first: every line carries the worker's id (``supervisor`` for the supervisor).
    The soft limit of open files is raised to the hard limit, as Go's runtime does: the
    HTTP server keeps clients' idle connections open (the workers inherit it).

    Args:
        spec: ``"module:attribute"`` naming a :data:`~goflux.service.Service`.
        options: How to run it (defaults: one worker, no probes, text logs).
        worker_id: Set by a supervisor for the worker processes it starts.
        status_fd: The worker's end of the supervisor's link (set by a supervisor).
        http_fd: The HTTP routes' listening socket, shared by the workers (set by a
            supervisor).

    Returns:
        0 after a clean drain; non-zero when the service failed to load, start or run
        (the reason is logged as one line): 2 when it cannot be loaded or has no HTTP
        routes for ``options.http_port``, else 1.

    Raises:
        ValueError: A bad log format or level.
    """
    options = options or RunOptions()
    supervised = status_fd is not None
    raised = raise_open_files_limit()
    if supervised or (options.workers == 1 and not options.reload):
        worker = worker_id if worker_id is not None else 1
        os.environ["GOFLUX_WORKER_ID"] = str(worker)
        configure_logging(options.log_format, str(worker), options.log_level)
        _log_raised(raised)
        return run_worker(spec, options, status_fd=status_fd, http_fd=http_fd)
    configure_logging(options.log_format, "supervisor", options.log_level)
    _log_raised(raised)
    return run_supervisor(spec, options)


def _log_raised(raised: tuple[int, int] | None) -> None:
    if raised is not None:
        logger.debug("open files limit raised from %d to %d", *raised)
