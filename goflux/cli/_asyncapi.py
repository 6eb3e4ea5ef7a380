"""``goflux asyncapi MODULE:ATTR``: write (or serve) a service's AsyncAPI 3.0 document.

::

    goflux asyncapi app.payments:service                       JSON on stdout
    goflux asyncapi app.payments:service --format yaml --out asyncapi.yaml
    goflux asyncapi app.payments:service --serve --port 8000   the rendered page

The service function fills a fresh Group (it may connect, as when it runs); nothing is
started. Exit status: 0, 1 when the service failed while filling its group (or the
output cannot be written or served), 2 when MODULE:ATTR cannot be loaded.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from pathlib import Path
from typing import Any

from goflux._errors import GofluxError
from goflux.asyncapi import RENDERER, AsyncAPI, DescribeError, asyncapi_app, describe_service
from goflux.service._load import ServiceLoadError

__all__ = ("add_asyncapi_command",)


def _write(args: argparse.Namespace, described: AsyncAPI) -> None:
    text = described.to_yaml() if args.format == "yaml" else described.to_json()
    if args.out:
        Path(args.out).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
        sys.stdout.flush()


async def _serve(args: argparse.Namespace, described: AsyncAPI) -> None:
    from goflux.service._http import HttpServer  # noqa: PLC0415 - needs uvicorn (an extra)

    yaml_text = None
    with contextlib.suppress(GofluxError):  # no PyYAML: the page and the JSON still work
        yaml_text = described.to_yaml()
    app = asyncapi_app(described.document, yaml_text=yaml_text, renderer=args.renderer)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        server = HttpServer(app, args.host, args.port)
        async with server:
            title = described.document["info"]["title"]
            print(
                f"AsyncAPI document of {title!r} on http://{args.host}:{server.port}/ "
                "(also /asyncapi.json, /asyncapi.yaml); Ctrl-C stops",
                flush=True,
            )
            await stop.wait()
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(signum)


def _asyncapi(args: argparse.Namespace) -> int:
    try:
        described = asyncio.run(describe_service(args.service, app_dir=args.app_dir))
    except ServiceLoadError as exc:
        print(f"goflux asyncapi: {exc}", file=sys.stderr)
        return 2
    except DescribeError as exc:
        print(f"goflux asyncapi: {exc}", file=sys.stderr)
        return 1
    for left in described.skipped:
        print(f"goflux asyncapi: left out {left.member}: {left.reason}", file=sys.stderr)
    try:
        if args.serve:
            asyncio.run(_serve(args, described))
        else:
            _write(args, described)
    except (OSError, DescribeError) as exc:
        print(f"goflux asyncapi: {exc}", file=sys.stderr)
        return 1
    return 0


def add_asyncapi_command(commands: Any) -> None:
    """Add ``goflux asyncapi`` to the ``commands`` of an argparse parser."""
    command = commands.add_parser(
        "asyncapi",
        help="write a service's AsyncAPI 3.0 document (nothing is started)",
        description="Build MODULE:ATTR's Group without starting it and write its AsyncAPI "
        "3.0 document: channels, operations, payload schemas, servers. Exit status: 0; 1 "
        "when the service fails while filling its group; 2 when it cannot be loaded.",
    )
    command.add_argument("service", help="the service, as module:attribute (app.payments:service)")
    command.add_argument("--format", choices=("json", "yaml"), default="json", help="default json")
    command.add_argument("--out", help="write to this file (default: stdout)")
    command.add_argument(
        "--app-dir", default=".", help="directory put first on sys.path (default: current)"
    )
    command.add_argument(
        "--serve", action="store_true", help="serve the rendered document over HTTP until Ctrl-C"
    )
    command.add_argument("--host", default="127.0.0.1", help="with --serve (default 127.0.0.1)")
    command.add_argument(
        "--port", type=int, default=8000, help="with --serve (default 8000; 0: any)"
    )
    command.add_argument(
        "--renderer", default=RENDERER,
        help="base URL of @asyncapi/react-component for the page (default: unpkg)",
    )  # fmt: skip
    command.set_defaults(run=_asyncapi)
