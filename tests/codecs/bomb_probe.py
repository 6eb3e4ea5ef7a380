"""Decode a bomb in a fresh process; print peak memory growth and time (run by the tests).

Usage: python -m tests.codecs.bomb_probe CODEC FILE [MAX_SIZE|none]
Prints one JSON line: {"error": ..., "grown": bytes, "seconds": ...}.
"""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from goflux import DecodeError, codecs

KiB = 1024


def main() -> None:
    name, path = sys.argv[1], sys.argv[2]
    limit = sys.argv[3] if len(sys.argv) > 3 else "default"
    kwargs = {} if limit == "default" else {"max_size": None if limit == "none" else int(limit)}
    codec = getattr(codecs, name)(**kwargs)
    data = Path(path).read_bytes()
    codec.decode(codec.encode(b"warm up"))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB
    started = time.perf_counter()
    error = None
    size = None
    try:
        size = len(codec.decode(data))
    except DecodeError as exc:
        error = str(exc)
    seconds = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * KiB
    print(json.dumps({"error": error, "size": size, "grown": after - before, "seconds": seconds}))


if __name__ == "__main__":
    main()
