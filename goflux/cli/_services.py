"""``goflux services``: list the NATS micro services (ADR-32) on a server.

::

    goflux services [--server URL] [--timeout 1] [--json] [NAME]

It asks ``$SRV.INFO`` and ``$SRV.STATS`` (``.NAME`` with a name) and collects every
instance's answers until the timeout: services of any language answer, goflux
responders registered with a ``MicroService`` among them. Like ``nats micro ls``, it
waits the whole timeout, since no answer says it is the last; when no service at all
matches, the server says so at once (a "no responders" status) and it returns then.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import Sequence
from typing import Any

from goflux.cli._actions import Action, Connect, runner

__all__ = ("add_services_command",)

_HEADER = ("name", "id", "version", "endpoint", "subject", "queue", "requests", "errors", "average")


def _timeout(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, got {text}")
    return value


def _name(text: str) -> str:
    from goflux.transports.nats._micro_types import check_name  # noqa: PLC0415 - nats extra

    try:
        return check_name("service", text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


async def _collect(
    nc: Any, name: str | None, timeout: float
) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
    """The INFO and STATS answers by service instance ID, collected for ``timeout`` s."""
    answers: dict[str, dict[str, dict[str, Any]]] = {"INFO": {}, "STATS": {}}
    nobody = asyncio.Event()

    async def on_answer(msg: Any) -> None:
        verb = msg.subject.rpartition(".")[2]
        if not msg.data and (msg.headers or {}).get("Status") == "503":
            nobody.set()  # no responders: no service matches
            return
        try:
            answer = json.loads(msg.data)
        except ValueError:
            return  # not a micro service's answer
        if isinstance(answer, dict) and isinstance(answer.get("id"), str):
            answers[verb][answer["id"]] = answer

    inbox = nc.new_inbox()
    subscription = await nc.subscribe(f"{inbox}.*", cb=on_answer)
    suffix = f".{name}" if name else ""
    try:
        for verb in answers:
            await nc.publish(f"$SRV.{verb}{suffix}", b"", reply=f"{inbox}.{verb}")
        await nc.flush()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(nobody.wait(), timeout)
    finally:
        await subscription.unsubscribe()
    return answers["INFO"], answers["STATS"]


def _duration(nanoseconds: object) -> str:
    """Nanoseconds for people: ``850ns``, ``12.5us``, ``3.2ms``, ``1.50s``."""
    if not isinstance(nanoseconds, int | float):
        return "-"
    if nanoseconds < 1_000:
        return f"{int(nanoseconds)}ns"
    if nanoseconds < 1_000_000:
        return f"{nanoseconds / 1_000:.1f}us"
    if nanoseconds < 1_000_000_000:
        return f"{nanoseconds / 1_000_000:.1f}ms"
    return f"{nanoseconds / 1_000_000_000:.2f}s"


def _endpoint_key(endpoint: dict[str, Any]) -> tuple[object, object]:
    """Endpoints are matched by name and subject (names may repeat in a service)."""
    return endpoint.get("name"), endpoint.get("subject")


def _rows(info: dict[str, Any] | None, stats: dict[str, Any] | None) -> list[tuple[object, ...]]:
    """One service instance's table rows: one per endpoint (one with ``-`` for none)."""
    about = info or stats or {}
    service = (about.get("name", "-"), about.get("id", "-"), about.get("version", "-"))
    listed = [e for e in (info or {}).get("endpoints") or () if isinstance(e, dict)]
    counted = [e for e in (stats or {}).get("endpoints") or () if isinstance(e, dict)]
    counters = {_endpoint_key(e): e for e in counted}
    seen = {_endpoint_key(e) for e in listed}
    only_counted = [e for e in counted if _endpoint_key(e) not in seen]
    rows: list[tuple[object, ...]] = []
    for endpoint in [*listed, *only_counted]:
        counter = counters.get(_endpoint_key(endpoint))
        rows.append(
            (
                *service,
                endpoint.get("name", "-"),
                endpoint.get("subject", "-"),
                endpoint.get("queue_group") or "-",
                "-" if counter is None else counter.get("num_requests", "-"),
                "-" if counter is None else counter.get("num_errors", "-"),
                "-" if counter is None else _duration(counter.get("average_processing_time")),
            )
        )
    return rows or [(*service, "-", "-", "-", "-", "-", "-")]


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    cells = [list(header), *([str(c) for c in row] for row in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(line.rstrip() for line in lines)


def _key(answer: dict[str, Any]) -> tuple[str, str, str]:
    return (str(answer.get("name", "")), str(answer.get("version", "")), str(answer.get("id", "")))


async def _services(nc: Any, args: argparse.Namespace) -> int:
    infos, stats = await _collect(nc, args.name, args.timeout)
    ids = sorted(infos.keys() | stats.keys(), key=lambda i: _key(infos.get(i) or stats[i]))
    if args.json:
        found = [{"info": infos.get(i), "stats": stats.get(i)} for i in ids]
        print(json.dumps(found, indent=2, sort_keys=True, ensure_ascii=False))
        return 0
    if not ids:
        print("no services" if args.name is None else f"no services named {args.name!r}")
        return 0
    rows = [row for i in ids for row in _rows(infos.get(i), stats.get(i))]
    print(_table(_HEADER, rows))
    return 0


_COMMANDS: dict[str, Action] = {"services": _services}


def add_services_command(commands: Any, *, connect: Connect, default_url: str) -> None:
    """Add ``goflux services`` to the command line's subcommands."""
    services = commands.add_parser(
        "services",
        help="list NATS micro services (name, endpoints, requests, errors)",
        description="List the NATS micro services (ADR-32) on a server: every instance "
        "that answers $SRV.INFO and $SRV.STATS within the timeout, one row per endpoint "
        "with its subject, queue group, requests, errors and average processing time.",
    )
    services.add_argument(
        "--server", "--url", dest="url",
        help=f"NATS server (default: $NATS_URL, else {default_url})",
    )  # fmt: skip
    services.add_argument(
        "--timeout", type=_timeout, default=1.0, metavar="S",
        help="seconds to collect answers (default 1)",
    )  # fmt: skip
    services.add_argument(
        "--json", action="store_true",
        help="print each instance's INFO and STATS answers as JSON (sorted)",
    )  # fmt: skip
    services.add_argument(
        "name", nargs="?", type=_name, metavar="NAME", help="only services with this name"
    )
    services.set_defaults(
        action="services", run=runner(_COMMANDS, connect=connect, default_url=default_url)
    )
