"""Byte codecs against implementations no one here wrote: Node's zlib, snappyjs, zstd.

Both directions on the same bytes: Node decodes what goflux encodes (and says whether it
got the payload back), and goflux decodes what Node encodes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goflux import JsonCodec
from goflux.codecs import Base64, Brotli, Flate, Gzip, Hex, Snappy, Zstd, pipe
from tests.codecs.payloads import PAYLOADS
from tests.models import Order
from tests.nodejs import run_node

CODECS: dict[str, Any] = {
    "gzip": Gzip(),
    "deflate": Flate(),
    "brotli": Brotli(),
    "snappy": Snappy(),
    "zstd": Zstd(),
    "base64": Base64(),
    "base64url": Base64("url", padding=False),  # Node's base64url has no padding
    "hex": Hex(),
}
NAMES = {f"p{i}": name for i, name in enumerate(PAYLOADS)}


async def test_node_and_goflux_read_each_others_bytes(tmp_path: Path) -> None:
    for key, name in NAMES.items():
        (tmp_path / f"{key}.raw").write_bytes(PAYLOADS[name])
        for fmt, codec in CODECS.items():
            (tmp_path / f"{fmt}.{key}.py").write_bytes(codec.encode(PAYLOADS[name]))
    json_gzip = pipe(JsonCodec(Order), Gzip())
    value = Order(id="ö-1", customerId="c-✓", amount=12.5, lines=["a", "🎉"])
    (tmp_path / "pipe.json.py").write_bytes(json_gzip.encode(value))

    result = await run_node("codecs_bytes.mjs", str(tmp_path))

    # Node decoded what goflux wrote, every format and payload (fzstd: a second decoder).
    expected = {fmt: dict.fromkeys(NAMES, True) for fmt in [*CODECS, "fzstd"]}
    assert result["decoded"] == expected
    assert result["pipe"] == value.model_dump(mode="json", by_alias=True)

    # goflux decodes what Node wrote.
    failures = []
    for key, name in NAMES.items():
        for fmt, codec in CODECS.items():
            written = (tmp_path / f"{fmt}.{key}.node").read_bytes()
            if codec.decode(written) != PAYLOADS[name]:
                failures.append(f"{fmt} {name}")
    assert failures == []
    assert json_gzip.decode((tmp_path / "pipe.json.node").read_bytes()) == value
