"""Payloads every byte codec must carry: empty, unicode text, 1 MB, incompressible."""

from __future__ import annotations

import json
import random

MB = 1_000_000


def _json_megabyte() -> bytes:
    rows = [
        {"id": f"o-{i}", "customer": f"c-{i % 97}", "amount": i * 1.25, "note": "ünïcödé ✓"}
        for i in range(20_000)
    ]
    return json.dumps(rows, ensure_ascii=False).encode()[:MB]


PAYLOADS: dict[str, bytes] = {
    "empty": b"",
    "one byte": b"\x00",
    "unicode": "Grüße, 世界! 🎉 ünïcödé ✓ ".encode() * 3,
    "1 MB json": _json_megabyte(),
    "1 MB random": random.Random(34).randbytes(MB),
}
