"""Log lines of ``goflux run``: JSON or text, each with the worker's id."""

from __future__ import annotations

import json
import logging
import sys
import time
from typing import Literal

__all__ = ("LogFormat", "configure_logging")

LogFormat = Literal["json", "text"]


class _JsonLines(logging.Formatter):
    """One JSON object per line: time, level, worker, logger, message, exception."""

    def __init__(self, worker: str) -> None:
        super().__init__()
        self._worker = worker

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, object] = {
            "time": _iso(record.created),
            "level": record.levelname,
            "worker": self._worker,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


class _Text(logging.Formatter):
    def __init__(self, worker: str) -> None:
        super().__init__(f"%(asctime)s %(levelname)s worker={worker} %(name)s: %(message)s")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:  # noqa: N802
        return _iso(record.created)


def _iso(created: float) -> str:
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created))
    return f"{whole}.{int(created % 1 * 1000):03d}Z"


def configure_logging(fmt: LogFormat, worker: str, level: str = "INFO") -> None:
    """Send every log record to stderr as ``fmt`` lines naming ``worker``.

    Replaces the root logger's handlers (the process is a service run by ``goflux
    run``, which owns its logging); uvicorn's and nats-py's loggers propagate to it.

    Raises:
        ValueError: ``fmt`` is not "json" or "text", or ``level`` is no level name.
    """
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be 'json' or 'text', got {fmt!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonLines(worker) if fmt == "json" else _Text(worker))
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # uvicorn only serves the probes here: its start and stop lines are noise, its
    # warnings and errors are not (all of them with --log-level DEBUG).
    logging.getLogger("uvicorn").setLevel(
        logging.DEBUG if root.level <= logging.DEBUG else logging.WARNING
    )
    logging.captureWarnings(True)
