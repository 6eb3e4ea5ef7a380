"""Sessions: ``local_session`` (classic, this machine or a cluster) and ``connect_session``."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
from collections.abc import Iterator
from urllib.parse import urlsplit

from pyspark import SparkContext
from pyspark.sql import SparkSession

from goflux.transports.spark._errors import SourceOptionError, SparkError

__all__ = ("connect_session", "is_connect", "local_session")

_CONNECT_SCHEME = "sc://"
_CONNECT_PORT = 15002  # Spark Connect's default
_PROBE_TIMEOUT = 10.0


def is_connect(session: SparkSession) -> bool:
    """True for a Spark Connect session (a client of a remote Spark server)."""
    return type(session).__module__.startswith("pyspark.sql.connect")


@contextlib.contextmanager
def _stderr_to(path: str | os.PathLike[str]) -> Iterator[None]:
    """Point file descriptor 2 at ``path`` while the block runs (children keep it)."""
    if sys.stderr is not None:
        sys.stderr.flush()
    try:
        saved: int | None = os.dup(2)
    except OSError:  # fd 2 is closed: fill it with the log for good
        saved = None
    try:
        with open(path, "ab") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        if saved is not None:
            if sys.stderr is not None:
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)


def local_session(
    master: str = "local[2]",
    *,
    app_name: str = "goflux",
    jvm_log: str | os.PathLike[str] | None = None,
    **conf: str,
) -> SparkSession:
    """Build (or get) a classic SparkSession whose Python workers run this interpreter.

    ``master`` is ``local[N]`` or a cluster's URL (``spark://host:port``: the
    executors there need goflux installed and the NATS URL reachable). Sets
    ``PYSPARK_PYTHON`` to ``sys.executable`` when unset (otherwise workers run
    ``python3`` from ``PATH``, which may not have goflux or pyarrow installed), turns the
    UI off, uses few shuffle partitions and shows timestamps in UTC (collected rows
    then carry UTC wall-clock times). ``conf`` adds Spark settings.

    With ``jvm_log``, the driver JVM this call launches writes its console output
    (log4j lines, JVM warnings, Python workers' stderr) to that file, not to this
    process's stderr. The redirect is of file descriptor 2 while the JVM starts, so
    anything else this process writes to stderr in those seconds lands there too; it
    has no effect when the JVM is already running.

    Raises:
        SourceOptionError: ``master`` is a Spark Connect URL (use
            :func:`connect_session`).
    """
    if master.startswith(_CONNECT_SCHEME):
        raise SourceOptionError(
            f"{master!r} is a Spark Connect URL: use connect_session({master!r})"
        )
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    if jvm_log is None or SparkContext._gateway is not None:  # launched: nothing to catch
        return builder.getOrCreate()
    with _stderr_to(jvm_log):
        return builder.getOrCreate()


def connect_session(url: str, *, retry_seconds: float = 30.0, **conf: str) -> SparkSession:
    """Build (or get) a Spark Connect session to the server at ``url`` (``sc://host:port``).

    Needs ``goflux[spark-connect]`` here and goflux installed where the server runs
    its Python workers. Uses few shuffle partitions and UTC timestamps, like
    :func:`local_session`; ``conf`` adds session settings (runtime ones: the server
    fixed the rest when it started).

    PySpark's client retries an unreachable server for about ten minutes, during
    which every call (``awaitTermination``, ``history``) hangs. This session gives up
    after about ``retry_seconds`` instead (enough to ride out a brief outage), and
    checks the server with one request before returning.

    Raises:
        SourceOptionError: ``url`` is not an ``sc://`` URL, or ``retry_seconds`` <= 0.
        SparkError: Nothing accepts connections at ``url``, what answers there is no
            Spark Connect server, or the Spark Connect client libraries are missing.
    """
    if not url.startswith(_CONNECT_SCHEME):
        raise SourceOptionError(f"a Spark Connect URL starts with sc://, got {url!r}")
    if not retry_seconds > 0:
        raise SourceOptionError(f"retry_seconds must be > 0, got {retry_seconds!r}")
    _probe(url)
    settings = {
        "spark.sql.shuffle.partitions": "4",
        "spark.sql.session.timeZone": "UTC",
        **conf,
    }
    builder = SparkSession.builder.remote(url)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        session = builder.getOrCreate()
    except ImportError as exc:  # PySpark checks for grpcio & co. when connecting
        raise SparkError(
            f"Spark Connect needs its client libraries: pip install 'goflux[spark-connect]' ({exc})"
        ) from exc
    _bound_retries(session, retry_seconds)
    try:
        session.version  # noqa: B018 - one request: is it a Connect server?
    except Exception as exc:
        session.stop()
        raise SparkError(f"{url} does not answer as a Spark Connect server: {exc}") from exc
    return session


def _bound_retries(session: SparkSession, seconds: float) -> None:
    """Make the client's default retry policy give up after about ``seconds``."""
    # Only a Connect session gets here, so the connect extra is installed.
    from pyspark.sql.connect.client.retries import DefaultPolicy  # noqa: PLC0415

    client = session.client
    initial, multiplier, cap = 100, 2.0, 5_000  # milliseconds
    waits = [min(cap, initial * multiplier**n) for n in range(64)]
    retries = next(n for n in range(1, 65) if sum(waits[:n]) >= seconds * 1000)
    client.set_retry_policies(
        [
            DefaultPolicy(
                max_retries=retries,
                backoff_multiplier=multiplier,
                initial_backoff=initial,
                max_backoff=cap,
            )
            if isinstance(policy, DefaultPolicy)
            else policy
            for policy in client.get_retry_policies()
        ]
    )


def _probe(url: str) -> None:
    """Fail fast when nothing listens at a Connect URL's host and port.

    Raises:
        SourceOptionError: The URL's port is not a port.
        SparkError: The TCP connection is refused or times out.
    """
    try:
        where = urlsplit(url.split(";", 1)[0].replace(_CONNECT_SCHEME, "http://", 1))
        host, port = where.hostname or "localhost", where.port or _CONNECT_PORT
    except ValueError as exc:
        raise SourceOptionError(f"not a Spark Connect URL (sc://host:port): {url!r}") from exc
    try:
        with socket.create_connection((host, port), timeout=_PROBE_TIMEOUT):
            pass
    except OSError as exc:
        raise SparkError(f"no Spark Connect server answers at {host}:{port}: {exc}") from exc
