"""1 GiB bombs against the default bound, each in a fresh process: fast, and bounded memory.

The peak resident set of the decoding process (``ru_maxrss``) is measured around the
decode; a decoder that bounded the size only after decompressing would grow by 1 GiB.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from goflux.codecs import DEFAULT_MAX_SIZE
from tests.codecs import bombs

ROOT = Path(__file__).resolve().parents[2]
MiB = 1 << 20
BUILDERS = {
    "Gzip": bombs.gzip,
    "Flate": bombs.flate,
    "Zstd": bombs.zstd,
    "Brotli": bombs.brotli,
    "Snappy": bombs.snappy,
}

pytestmark = pytest.mark.slow


def probe(codec: str, bomb: Path, limit: str = "default") -> dict[str, Any]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.codecs.bomb_probe", codec, str(bomb), limit],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(out.stdout)


@pytest.mark.parametrize("codec", list(BUILDERS))
def test_a_gibibyte_bomb_fails_fast_in_bounded_memory(codec: str, tmp_path: Path) -> None:
    bomb = tmp_path / codec
    bomb.write_bytes(BUILDERS[codec](bombs.GiB))
    found = probe(codec, bomb)
    assert found["error"] == (
        f"{codec} cannot decode {bomb.stat().st_size} bytes: the decompressed size exceeds "
        f"the limit of {DEFAULT_MAX_SIZE} bytes (max_size)"
    )
    assert found["seconds"] < 5
    # The output buffer up to the limit, its last reallocation, the decoder's window.
    assert found["grown"] < 3 * DEFAULT_MAX_SIZE


def test_the_probe_sees_an_unbounded_decode(tmp_path: Path) -> None:
    """Without a bound the same measurement shows the whole expansion: it can fail."""
    bomb = tmp_path / "Zstd"
    bomb.write_bytes(bombs.zstd(256 * MiB))
    found = probe("Zstd", bomb, "none")
    assert found["error"] is None
    assert found["size"] == 256 * MiB
    assert found["grown"] > 3 * DEFAULT_MAX_SIZE  # what the bounded decodes stay under
