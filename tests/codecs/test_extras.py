"""The compression extra loads on first use, and a missing library is a clear error."""

from __future__ import annotations

import pytest

from tests.core.test_optional_dependencies import run_without


def test_importing_the_codecs_loads_no_optional_library() -> None:
    done = run_without(
        "nothing_at_all",
        """
        import sys
        import goflux.codecs
        from goflux.codecs import Gzip, Flate, Base64, pipe
        from goflux import JsonCodec
        pipe(JsonCodec(int), Gzip(), Flate(), Base64()).decode(
            pipe(JsonCodec(int), Gzip(), Flate(), Base64()).encode(1))
        print(sorted(m for m in ("cramjam", "brotli", "backports.zstd") if m in sys.modules))
        goflux.codecs.Snappy()
        print("cramjam" in sys.modules)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]", "True"]


@pytest.mark.parametrize(
    ("module", "codec"), [("cramjam", "Snappy"), ("brotli", "Brotli"), ("backports.zstd", "Zstd")]
)
def test_a_codec_without_its_library_says_which_extra(module: str, codec: str) -> None:
    done = run_without(
        module,
        f"""
        from goflux import MissingDependency
        from goflux.codecs import {codec}, Gzip
        assert Gzip().decode(Gzip().encode(b"x")) == b"x"
        try:
            {codec}()
        except MissingDependency as exc:
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        f"{codec} needs {module}, which is not installed: pip install 'goflux[compression]'"
    )
