"""The settings of ``goflux run`` shared by the supervisor and its workers."""

from __future__ import annotations

from dataclasses import dataclass, field

from goflux.service._logs import LogFormat

__all__ = ("RunOptions",)


@dataclass(frozen=True, slots=True)
class RunOptions:
    """How to run a service (the ``goflux run`` options).

    Attributes:
        drain_timeout: Seconds a worker's drain may take after SIGTERM/SIGINT.
        kill_grace: Seconds past ``drain_timeout`` before a process whose drain has
            not ended exits without it (or, under a supervisor, is killed).
        health_host: Address of the health probe server.
        health_port: Port of the health probe server (0: a free one); None: no server.
        http_host: Address the service's HTTP routes are served on.
        http_port: Port of the service's HTTP routes (the group's HTTP subscribers
            and responders; 0: a free one); None: not served. With several workers
            the supervisor binds it once and every worker serves it.
        log_format: ``"json"`` or ``"text"`` lines.
        log_level: Level name of the root logger.
        app_dir: Directory put first on ``sys.path`` to import the service.
        workers: Worker processes (1: the service runs in this process).
        reload: Restart the workers when a Python file under ``reload_dirs`` changes.
        reload_dirs: Directories watched with ``reload`` (default: ``app_dir``).
        max_restarts: Restarts of crashed workers allowed within ``restart_window``
            seconds; one more and the supervisor gives up (exits 1).
        restart_window: Seconds over which restarts are counted.
        backoff: Seconds before the first restart; doubled per restart in the window.
        max_backoff: Longest wait before a restart.
        quarantine_after: Under a supervisor, a JetStream message that was being
            handled when its worker died this many times is quarantined on its next
            delivery (dead-lettered if its subscriber has a ``dead_letter``, and
            terminated) instead of reaching a handler again; 0 turns this off.

    Raises:
        ValueError: An option is out of range, or the HTTP routes and the health
            probes are given the same port.
    """

    drain_timeout: float = 30.0
    kill_grace: float = 5.0
    health_host: str = "0.0.0.0"
    health_port: int | None = None
    http_host: str = "0.0.0.0"
    http_port: int | None = None
    log_format: LogFormat = "text"
    log_level: str = "INFO"
    app_dir: str = "."
    workers: int = 1
    reload: bool = False
    reload_dirs: tuple[str, ...] = field(default=())
    max_restarts: int = 5
    restart_window: float = 60.0
    backoff: float = 0.5
    max_backoff: float = 10.0
    quarantine_after: int = 2

    def __post_init__(self) -> None:
        if self.drain_timeout < 0:
            raise ValueError(f"drain timeout must be >= 0, got {self.drain_timeout}")
        if self.kill_grace < 0:
            raise ValueError(f"kill grace must be >= 0, got {self.kill_grace}")
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.health_port is not None and not 0 <= self.health_port <= 65535:
            raise ValueError(f"health port must be 0..65535, got {self.health_port}")
        if self.http_port is not None and not 0 <= self.http_port <= 65535:
            raise ValueError(f"HTTP port must be 0..65535, got {self.http_port}")
        if self.http_port and self.http_port == self.health_port:
            raise ValueError(
                f"the HTTP routes and the health probes need ports of their own, "
                f"both are {self.http_port}"
            )
        if self.max_restarts < 0:
            raise ValueError(f"max restarts must be >= 0, got {self.max_restarts}")
        if self.quarantine_after < 0:
            raise ValueError(f"quarantine after must be >= 0, got {self.quarantine_after}")
        if self.backoff < 0 or self.max_backoff < self.backoff:
            raise ValueError("backoff must be >= 0 and max_backoff >= backoff")
