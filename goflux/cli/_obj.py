"""``goflux obj``: list, store and fetch objects of Object store buckets.

::

    goflux obj ls [BUCKET]                    buckets, or a bucket's objects
    goflux obj put BUCKET FILE [--name NAME]  store a file (streamed in chunks)
    goflux obj get BUCKET NAME [--out FILE]   write an object to FILE (default: stdout)

Nothing is created: a missing bucket is an error. Reads check the object's digest.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any, BinaryIO

from goflux.cli._actions import Action, Connect, runner

__all__ = ("add_obj_commands",)

_PREFIX = "OBJ_"


async def _store(nc: Any, bucket: str) -> Any:
    from goflux.transports import jetstream  # noqa: PLC0415 - needs the nats extra

    return await jetstream.object_store(nc.jetstream(), bucket, create=False)


async def _ls(nc: Any, args: argparse.Namespace) -> int:
    if args.bucket is None:
        js = nc.jetstream()
        infos: list[Any] = []
        while True:  # the server answers a page at a time
            page = await js.streams_info(offset=len(infos))
            if not page:
                break
            infos += page
        buckets = sorted(
            (i.config.name[len(_PREFIX) :], i.state.bytes)
            for i in infos
            if (i.config.name or "").startswith(_PREFIX)
        )
        for name, size in buckets:
            print(f"{name}  bytes={size}")
        if not buckets:
            print("no buckets")
        return 0
    objects = await (await _store(nc, args.bucket)).list()
    for info in objects:
        print(f"{info.name}  {info.size}  {info.mtime.isoformat()}  {info.digest}")
    if not objects:
        print(f"no objects in bucket {args.bucket!r}")
    return 0


async def _put(nc: Any, args: argparse.Namespace) -> int:
    store = await _store(nc, args.bucket)
    path = Path(args.file)
    data = await asyncio.to_thread(path.open, "rb")
    try:
        info = await store.put(args.name or path.name, data)
    finally:
        data.close()
    print(f"{info.name}  {info.size} bytes in {info.chunks} chunks  {info.digest}")
    return 0


async def _get(nc: Any, args: argparse.Namespace) -> int:
    store = await _store(nc, args.bucket)

    async def copy(out: BinaryIO) -> None:
        async with store.open(args.name) as chunks:
            async for chunk in chunks:
                out.write(chunk)

    if args.out is None:
        await copy(sys.stdout.buffer)
        sys.stdout.flush()
        return 0
    target = Path(args.out)
    partial = target.with_name(target.name + ".part")
    try:
        with partial.open("wb") as out:
            await copy(out)  # a digest mismatch raises here: the file is not kept
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
    return 0


_COMMANDS: dict[str, Action] = {
    "ls": _ls,
    "put": _put,
    "get": _get,
}


def add_obj_commands(commands: Any, *, connect: Connect, default_url: str) -> None:
    """Add ``goflux obj ...`` to the command line's subcommands."""
    obj = commands.add_parser("obj", help="list, store and fetch objects")
    obj.add_argument("--url", help=f"NATS server (default: $NATS_URL, else {default_url})")
    actions = obj.add_subparsers(dest="action", required=True)
    ls = actions.add_parser("ls", help="buckets, or the objects of one")
    ls.add_argument("bucket", nargs="?")
    put = actions.add_parser("put", help="store a file")
    put.add_argument("bucket")
    put.add_argument("file")
    put.add_argument("--name", help="the object's name (default: the file's name)")
    get = actions.add_parser("get", help="fetch an object")
    get.add_argument("bucket")
    get.add_argument("name")
    get.add_argument("--out", help="write to this file (default: stdout)")

    obj.set_defaults(run=runner(_COMMANDS, connect=connect, default_url=default_url))
