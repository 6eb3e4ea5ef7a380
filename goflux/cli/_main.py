"""The parser, and the commands without a module of their own.

Those are demo, server, run, streams and consumers; the other commands add their
parsers from the modules beside this one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final
from urllib.parse import urlsplit

from goflux._errors import GofluxError, MissingDependency
from goflux._urls import redact_url, unbracket
from goflux.cli._asyncapi import add_asyncapi_command
from goflux.cli._kv import add_kv_commands, span
from goflux.cli._needs import extra_of, missing_extra
from goflux.cli._obj import add_obj_commands
from goflux.cli._services import add_services_command
from goflux.cli._version import VersionAction

if TYPE_CHECKING:
    from goflux.demo.summary import DemoSummary

__all__ = ("main",)

DEFAULT_URL = "nats://127.0.0.1:4222"


def _server(args: argparse.Namespace) -> int:
    from goflux.testing import NatsServer  # noqa: PLC0415 - only this command needs it

    store = Path(args.store).resolve() if args.store else None
    if store is not None:
        store.mkdir(parents=True, exist_ok=True)
    server = NatsServer(jetstream=True, port=args.port or None, store_dir=store)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    with server:
        where = store if store is not None else "a temporary directory (deleted on exit)"
        print(f"nats-server with JetStream on {server.url}, store in {where}", flush=True)
        print("Ctrl-C stops it.", flush=True)
        while not stop.wait(1.0):
            if not server.running:
                print("goflux server: nats-server exited unexpectedly", file=sys.stderr)
                return 1
    print("stopped", flush=True)
    return 0


def _run(args: argparse.Namespace) -> int:
    from goflux.service import RunOptions, run_service  # noqa: PLC0415 - needs goflux[service]

    try:
        options = RunOptions(
            drain_timeout=args.drain_timeout,
            kill_grace=args.kill_grace,
            health_host=args.health_host,
            health_port=args.health_port,
            http_host=args.http_host,
            http_port=args.http_port,
            log_format=args.log_format,
            log_level=args.log_level,
            app_dir=args.app_dir,
            workers=args.workers,
            reload=args.reload,
            reload_dirs=tuple(args.reload_dir or ()),
            max_restarts=args.max_restarts,
            quarantine_after=args.quarantine_after,
        )
    except ValueError as exc:  # options that do not go together: a usage error
        print(f"goflux run: error: {exc}", file=sys.stderr)
        return 2
    return run_service(
        args.service,
        options,
        worker_id=args.worker_id,
        status_fd=args.status_fd,
        http_fd=args.http_fd,
    )


def _add_run_command(commands: Any) -> None:
    run = commands.add_parser(
        "run",
        help="run a service (an async function taking a Group) until SIGTERM/SIGINT",
        description="Run MODULE:ATTR, an async function that fills a goflux Group, until "
        "SIGTERM or SIGINT, then drain it. Exit status: 0 after a clean drain, 1 when the "
        "service failed to start (a port in use included) or failed while running, 2 when "
        "it cannot be loaded or has no HTTP routes for --http-port.",
    )
    run.add_argument("service", help="the service, as module:attribute (e.g. app.payments:service)")
    run.add_argument(
        "--workers", type=_positive, default=1,
        help="worker processes (default 1: run in this process, no supervisor)",
    )  # fmt: skip
    run.add_argument(
        "--drain-timeout", type=_seconds, default=30.0,
        help="seconds a drain may take after SIGTERM (default 30)",
    )  # fmt: skip
    run.add_argument(
        "--kill-grace", type=_seconds, default=5.0,
        help="seconds past the drain timeout before a drain is abandoned (default 5)",
    )  # fmt: skip
    run.add_argument("--health-port", type=_any_port, help="serve /livez and /readyz on this port")
    run.add_argument(
        "--health-host", default="0.0.0.0", type=unbracket,
        help="address of the health probes (default 0.0.0.0)",
    )  # fmt: skip
    run.add_argument(
        "--http-port", type=_any_port,
        help="serve the HTTP routes of the service's group (its goflux.transports.http "
        "subscribers and responders) on this port once the group has started; a drain "
        "answers new requests 503; with --workers, the workers share one socket "
        "(0: any free port, logged)",
    )  # fmt: skip
    run.add_argument(
        "--http-host", default="0.0.0.0", type=unbracket,
        help="address of the HTTP routes (default 0.0.0.0)",
    )  # fmt: skip
    run.add_argument("--log-format", choices=("text", "json"), default="text")
    run.add_argument("--log-level", default="INFO", type=_level, help="default INFO")
    run.add_argument("--reload", action="store_true", help="restart on Python file changes (dev)")
    run.add_argument(
        "--reload-dir", action="append", help="directory to watch (repeatable; default --app-dir)"
    )
    run.add_argument(
        "--app-dir", default=".", help="directory put first on sys.path (default: current)"
    )
    run.add_argument(
        "--max-restarts", type=int, default=5,
        help="restarts of crashed workers allowed per minute before giving up (default 5)",
    )  # fmt: skip
    run.add_argument(
        "--quarantine-after", type=_count, default=2,
        help="with --workers: a JetStream message being handled at this many worker "
        "crashes is dead-lettered or terminated on redelivery (default 2; 0: never)",
    )  # fmt: skip
    run.add_argument("--worker-id", type=int, help=argparse.SUPPRESS)  # set by the supervisor
    run.add_argument("--status-fd", type=int, help=argparse.SUPPRESS)  # set by the supervisor
    run.add_argument("--http-fd", type=int, help=argparse.SUPPRESS)  # set by the supervisor
    run.set_defaults(run=_run)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _count(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 seconds, got {text}")
    return value


def _level(text: str) -> str:
    level = text.upper()
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
        raise argparse.ArgumentTypeError(f"not a log level: {text!r}")
    return level


def _demo(args: argparse.Namespace) -> int:
    from goflux.demo.run import DemoConfig, run_and_print  # noqa: PLC0415

    url = args.url or os.environ.get("NATS_URL") or None
    config = DemoConfig(
        orders=args.orders,
        url=url,
        master=args.master,
        remote=args.remote,
        spark_logs=args.spark_logs,
        batches=args.batches,
        checkpoint=args.checkpoint,
        traces=args.traces,
    )

    def report(summary: DemoSummary) -> None:
        if args.summary_json:
            Path(args.summary_json).write_text(json.dumps(summary.as_dict(), indent=2))

    return run_and_print(config, report=report)


async def _quiet(_: Exception) -> None:
    """nats-py logs every failed attempt with a traceback; the CLI reports once."""


async def _connect(url: str) -> Any:
    import nats  # noqa: PLC0415

    try:
        return await nats.connect(
            url, allow_reconnect=False, connect_timeout=5, max_reconnect_attempts=1,
            error_cb=_quiet,
        )  # fmt: skip
    except Exception as exc:
        said = str(exc).removeprefix("nats: ").strip().strip("'")
        if not type(exc).__module__.startswith("nats") or "no servers available" in said:
            said = await _greeting_error(url)  # a server that refuses says so first
        if said:
            raise OSError(
                f"the NATS server at {redact_url(url)} refused the connection: {said}"
            ) from exc
        raise OSError(
            f"cannot reach a NATS server at {redact_url(url)} ({type(exc).__name__})"
        ) from exc


async def _greeting_error(url: str) -> str:
    """The ``-ERR`` a server greets a new connection with, or ``""``.

    A server at its connection limit says "maximum connections exceeded" after its
    INFO line, then closes the connection.
    """
    parsed = urlsplit(url if "://" in url else f"nats://{url}")
    try:
        async with asyncio.timeout(2):
            reader, writer = await asyncio.open_connection(
                parsed.hostname or "127.0.0.1", parsed.port or 4222
            )
            try:
                lines = [await reader.readline(), await reader.readline()]
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):
        return ""
    for line in lines:
        text = line.decode(errors="replace").strip()
        if text.startswith("-ERR"):
            return text.removeprefix("-ERR").strip().strip("'")
    return ""


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(map(str, header)), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


_FLAGS: Final = (
    ("allow_msg_counter", "counters"),
    ("allow_msg_schedules", "schedules"),
    ("allow_batched", "batched"),
    ("allow_atomic", "atomic"),
    ("allow_msg_ttl", "msg_ttl"),
)


def _settings(config: Any) -> str:
    """The newer settings a stream has on: counters, schedules, batched, TTLs; ``-``: none."""
    shown = [label for field, label in _FLAGS if getattr(config, field, None)]
    for label, field in (("max_age", "max_age"), ("markers", "subject_delete_marker_ttl")):
        seconds = getattr(config, field, None)
        if seconds:
            shown.append(f"{label}={span(seconds)}")
    return ",".join(shown) or "-"


async def _streams(url: str) -> str:
    nc = await _connect(url)
    try:
        infos = await nc.jetstream().streams_info()
    finally:
        await nc.close()
    rows = [
        (
            info.config.name,
            ",".join(info.config.subjects or []),
            info.state.messages,
            info.state.bytes,
            info.state.first_seq,
            info.state.last_seq,
            info.state.consumer_count,
            _settings(info.config),
        )
        for info in sorted(infos, key=lambda i: i.config.name or "")
    ]
    header = ("stream", "subjects", "messages", "bytes", "first", "last", "consumers", "settings")
    return _table(header, rows) if rows else "no streams"


async def _consumers(url: str, stream: str | None) -> str:
    nc = await _connect(url)
    try:
        js = nc.jetstream()
        names = [stream] if stream else sorted(i.config.name or "" for i in await js.streams_info())
        rows = [
            (
                name,
                info.name,
                info.config.filter_subject or ",".join(info.config.filter_subjects or []) or "-",
                info.num_pending,
                info.num_ack_pending,
                info.num_redelivered,
                info.delivered.stream_seq if info.delivered else 0,
            )
            for name in names
            for info in sorted(await js.consumers_info(name), key=lambda i: i.name or "")
        ]
    finally:
        await nc.close()
    header = ("stream", "consumer", "filter", "lag", "ack_pending", "redelivered", "last_seq")
    return _table(header, rows) if rows else "no consumers"


def _inspect(args: argparse.Namespace) -> int:
    url = args.url or os.environ.get("NATS_URL") or DEFAULT_URL
    if args.command == "streams":
        print(asyncio.run(_streams(url)))
    else:
        print(asyncio.run(_consumers(url, args.stream)))
    return 0


def _port(text: str, *, lowest: int = 1) -> int:
    port = int(text)
    if not lowest <= port <= 65535:
        free = " (0: any free port)" if lowest == 0 else ""
        raise argparse.ArgumentTypeError(f"port must be {lowest}..65535{free}, got {port}")
    return port


def _any_port(text: str) -> int:
    return _port(text, lowest=0)


def _orders(text: str) -> int:
    count = int(text)
    if count < 13:
        raise argparse.ArgumentTypeError(
            f"at least 13 orders, so that some are flaky and some invalid (got {count})"
        )
    return count


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="goflux", description="goflux tools")
    parser.add_argument(
        "--version", action=VersionAction, help="print the versions of goflux and its libraries"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    _add_run_command(commands)
    add_asyncapi_command(commands)
    server = commands.add_parser("server", help="run a development JetStream server")
    server.add_argument(
        "--port", type=_any_port, default=4222, help="client port (default 4222; 0: any free port)"
    )
    server.add_argument("--store", help="JetStream store directory (default: temporary)")
    server.set_defaults(run=_server)
    demo = commands.add_parser("demo", help="run the end-to-end pipeline")
    demo.add_argument("--orders", type=_orders, default=500, help="orders to publish (at least 13)")
    where = demo.add_mutually_exclusive_group()
    where.add_argument("--master", default="local[*]", help="Spark master URL")
    where.add_argument(
        "--remote", help="run the Spark step on a Spark Connect server (sc://HOST:PORT)"
    )
    demo.add_argument(
        "--spark-logs", action="store_true", help="show Spark's own log lines (hidden by default)"
    )
    demo.add_argument("--batches", type=int, default=3, help="about how many Spark batches")
    demo.add_argument("--url", help="NATS server (default: $NATS_URL, else an embedded one)")
    demo.add_argument("--summary-json", help="also write the summary to this file")
    demo.add_argument("--traces", help="write the spans to this file (JSON lines)")
    demo.add_argument(
        "--checkpoint", help="Spark checkpoint directory (default: temporary; shared on a cluster)"
    )
    demo.set_defaults(run=_demo)
    for name, text in (("streams", "list streams"), ("consumers", "list consumers and lag")):
        sub = commands.add_parser(
            name,
            help=text,
            description="lag: messages not yet delivered to the consumer (num_pending)"
            if name == "consumers"
            else None,
        )
        sub.add_argument("--url", help=f"NATS server (default: $NATS_URL, else {DEFAULT_URL})")
        if name == "consumers":
            sub.add_argument("stream", nargs="?", help="only this stream's consumers")
        sub.set_defaults(run=_inspect)
    add_kv_commands(commands, connect=_connect, default_url=DEFAULT_URL)
    add_services_command(commands, connect=_connect, default_url=DEFAULT_URL)
    add_obj_commands(commands, connect=_connect, default_url=DEFAULT_URL)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``goflux`` command line; return the exit status."""
    args = _parser().parse_args(argv)
    missing = missing_extra(args)  # one line naming the extra to install, not a traceback
    if missing is not None:
        print(missing, file=sys.stderr)
        return 2
    try:
        return int(args.run(args))
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # the reader went away (``goflux obj get ... | head``): quietly
        with contextlib.suppress(OSError):  # no flush of the dead pipe at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except ImportError as exc:
        extra = extra_of(exc)
        if isinstance(exc, MissingDependency):  # says what to install itself
            print(f"goflux {args.command}: {exc}", file=sys.stderr)
        elif extra is not None:  # an import that NEEDS (goflux/cli/_needs.py) did not foresee
            print(
                f"goflux {args.command} needs the '{extra}' extra ({exc.name} is not installed): "
                f"pip install 'goflux[{extra}]'",
                file=sys.stderr,
            )
        else:
            raise
        return 2
    except Exception as exc:
        if isinstance(exc, GofluxError | OSError | TimeoutError) or type(exc).__module__.startswith(
            "nats"
        ):
            print(f"goflux {args.command}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 2
        raise


if __name__ == "__main__":
    sys.exit(main())
