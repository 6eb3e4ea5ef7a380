"""``goflux kv``: look at and change Key-Value buckets from the command line.

::

    goflux kv ls [BUCKET]                 buckets (key counts, TTLs), or a bucket's keys
    goflux kv get BUCKET KEY              the value's bytes on stdout (revision, TTL on stderr)
    goflux kv put BUCKET KEY [VALUE]      set it (VALUE, else stdin); prints the revision
    goflux kv watch BUCKET [PATTERN]      print changes until interrupted (--history);
                                          a server marker as purge(MaxAge)

Values are bytes as stored; nothing is created: a missing bucket is an error.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from typing import Any

from goflux._codecs import BytesCodec
from goflux.cli._actions import Action, Connect, runner

__all__ = ("add_kv_commands", "span")

_PREFIX = "KV_"


def _text(value: bytes | None) -> str:
    if value is None:
        return "-"
    try:
        return value.decode()
    except UnicodeDecodeError:
        return repr(value)


def span(seconds: float) -> str:
    """A duration as ``90s``, ``5m``, ``2h``, ``1.5s`` (whole minutes and hours shortened)."""
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def _ttls(config: dict[str, Any]) -> str:
    """A bucket's ``ttl=`` (max age) and ``markers=`` (limit marker TTL), where set."""
    shown = []
    for label, field in (("ttl", "max_age"), ("markers", "subject_delete_marker_ttl")):
        nanoseconds = config.get(field) or 0
        if nanoseconds:
            shown.append(f"  {label}={span(nanoseconds / 1e9)}")
    return "".join(shown)


async def _bucket(nc: Any, name: str) -> Any:
    """The existing bucket ``name`` (never created here)."""
    from nats.js.errors import NotFoundError  # noqa: PLC0415 - needs the nats extra

    from goflux.transports import jetstream  # noqa: PLC0415
    from goflux.transports.jetstream._kv.entry import check_bucket  # noqa: PLC0415

    check_bucket(name)
    js = nc.jetstream()
    try:
        info = await js.stream_info(_PREFIX + name)
    except NotFoundError as exc:
        raise jetstream.BucketNotFound(f"bucket {name!r} not found", bucket=name) from exc
    return jetstream.KeyValue(js, name, BytesCodec(), direct=bool(info.config.allow_direct))


async def _ls(nc: Any, args: argparse.Namespace) -> int:
    if args.bucket is None:
        from goflux.transports.jetstream._api import api_request  # noqa: PLC0415

        streams: list[dict[str, Any]] = []
        while True:  # the server answers a page at a time
            page = await api_request(
                nc.jetstream(), "STREAM.LIST", {"subject": "$KV.*.>", "offset": len(streams)}
            )
            streams.extend(page.get("streams") or [])
            if not page.get("streams") or len(streams) >= page.get("total", 0):
                break
        buckets = sorted(
            (
                stream["config"]["name"][len(_PREFIX) :],
                stream["state"].get("num_subjects", 0),
                stream["state"].get("messages", 0),
                _ttls(stream["config"]),
            )
            for stream in streams
            if stream["config"]["name"].startswith(_PREFIX)
        )
        for name, keys, writes, ttls in buckets:
            print(f"{name}  keys={keys}  writes={writes}{ttls}")
        if not buckets:
            print("no buckets")
        return 0
    kv = await _bucket(nc, args.bucket)
    keys = [key async for key in kv.keys(args.pattern)]
    for key in keys:
        print(key)
    if not keys:
        print(f"no keys in bucket {args.bucket!r}")
    return 0


async def _get(nc: Any, args: argparse.Namespace) -> int:
    kv = await _bucket(nc, args.bucket)
    entry = await kv.get(args.key)
    if entry is None:
        print(f"goflux kv: key {args.key!r} not found in bucket {args.bucket!r}", file=sys.stderr)
        return 1
    expires = ""
    if entry.ttl == timedelta.max:  # "never", or another client's TTL past a timedelta
        expires = ", ttl never (kept past the bucket's ttl)"
    elif entry.ttl is not None:
        total = entry.ttl.total_seconds()
        left = total - (datetime.now(UTC) - entry.created).total_seconds()
        expires = f", expires in {max(0, round(left))}s (ttl {span(total)})"
    print(f"revision {entry.revision}, {entry.created.isoformat()}{expires}", file=sys.stderr)
    sys.stdout.buffer.write(entry.value or b"")
    if sys.stdout.isatty():  # a newline for the prompt; piped, the bytes as stored
        sys.stdout.buffer.write(b"\n")
    sys.stdout.flush()
    return 0


async def _put(nc: Any, args: argparse.Namespace) -> int:
    kv = await _bucket(nc, args.bucket)
    value = args.value.encode() if args.value is not None else sys.stdin.buffer.read()
    print(await kv.put(args.key, value))
    return 0


async def _watch(nc: Any, args: argparse.Namespace) -> int:
    kv = await _bucket(nc, args.bucket)
    async with kv.watch(args.pattern, include_history=args.history) as entries:
        async for entry in entries:
            operation = entry.operation
            if entry.marker_reason:  # the server's own marker: why (MaxAge, ...)
                operation = f"{operation}({entry.marker_reason})"
            print(f"{entry.revision}  {entry.key}  {operation}  {_text(entry.value)}", flush=True)
    return 0


_COMMANDS: dict[str, Action] = {
    "ls": _ls,
    "get": _get,
    "put": _put,
    "watch": _watch,
}


def add_kv_commands(commands: Any, *, connect: Connect, default_url: str) -> None:
    """Add ``goflux kv ...`` to the command line's subcommands."""
    kv = commands.add_parser("kv", help="look at and change Key-Value buckets")
    kv.add_argument("--url", help=f"NATS server (default: $NATS_URL, else {default_url})")
    actions = kv.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("ls", help="buckets, or the keys of one")
    ls.add_argument("bucket", nargs="?")
    ls.add_argument("pattern", nargs="?", default=">", help="key pattern (default: all)")
    get = actions.add_parser("get", help="print a key's value")
    get.add_argument("bucket")
    get.add_argument("key")
    put = actions.add_parser("put", help="set a key (VALUE, else stdin)")
    put.add_argument("bucket")
    put.add_argument("key")
    put.add_argument("value", nargs="?")
    watch = actions.add_parser("watch", help="print changes until interrupted")
    watch.add_argument("bucket")
    watch.add_argument("pattern", nargs="?", default=">", help="key pattern (default: all)")
    watch.add_argument("--history", action="store_true", help="start with every kept write")

    kv.set_defaults(run=runner(_COMMANDS, connect=connect, default_url=default_url))
