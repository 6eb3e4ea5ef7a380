"""The codec extras load on first use, and a missing library is a clear error."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.core.test_optional_dependencies import run_without
from tests.processes import ROOT

_UNINSTALL = """
import importlib.machinery, sys

_ABSENT = {absent!r}
_find_spec = importlib.machinery.PathFinder.find_spec.__func__


def find_spec(cls, name, path=None, target=None):
    if name.split(".")[0] in _ABSENT:
        return None  # what the path finder says of a package that is not installed
    return _find_spec(cls, name, path, target)


importlib.machinery.PathFinder.find_spec = classmethod(find_spec)
for name in [m for m in sys.modules if m.split(".")[0] in _ABSENT]:
    del sys.modules[name]
"""


def run_uninstalled(absent: tuple[str, ...], code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter in which the ``absent`` packages are not installed.

    The path finder does not see them, as in an environment without them: unlike
    ``sys.modules[name] = None``, a module of a missing package (``backports.zstd``,
    ``ruamel.yaml``) is then missing with its parent, as it is on a real install.
    """
    script = _UNINSTALL.format(absent=absent) + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,  # below the test's 60 s
    )


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


_ZSTD = pytest.param(
    ("backports",),
    "Zstd()",
    "Zstd needs backports.zstd, which is not installed: pip install 'goflux[compression]'",
    marks=[
        pytest.mark.skipif(
            sys.version_info >= (3, 14), reason="compression.zstd is in the standard library"
        ),
        pytest.mark.slow,
    ],
    id="Zstd",
)


@pytest.mark.parametrize(
    ("absent", "make", "message"),
    [
        # A child process each: YamlCodec's case is the fast tier's, the others go slow.
        pytest.param(
            ("cramjam",),
            "Snappy()",
            "Snappy needs cramjam, which is not installed: pip install 'goflux[compression]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ("brotli",),
            "Brotli()",
            "Brotli needs brotli, which is not installed: pip install 'goflux[compression]'",
            marks=pytest.mark.slow,
        ),
        _ZSTD,
        (
            ("ruamel",),
            "YamlCodec(int)",
            "YamlCodec needs ruamel.yaml, which is not installed: pip install 'goflux[yaml]'",
        ),
        pytest.param(
            ("msgpack", "ormsgpack"),
            "MsgpackCodec(int)",
            "MsgpackCodec needs ormsgpack, which is not installed: pip install 'goflux[msgpack]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ("tomli_w",),
            "TomlCodec(dict)",
            "TomlCodec needs tomli_w, which is not installed: pip install 'goflux[toml]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            ("defusedxml",),
            "XmlCodec(dict)",
            "XmlCodec needs defusedxml, which is not installed: pip install 'goflux[xml]'",
            marks=pytest.mark.slow,
        ),
    ],
    ids=["Snappy", "Brotli", "Zstd", "YamlCodec", "MsgpackCodec", "TomlCodec", "XmlCodec"],
)
def test_a_codec_without_its_library_says_which_extra(
    absent: tuple[str, ...], make: str, message: str
) -> None:
    # A module inside a missing package (backports.zstd, ruamel.yaml) is missing with
    # its parent: looking it up must not fail on the parent.
    done = run_uninstalled(
        absent,
        f"""
        from goflux import MissingDependency
        from goflux.codecs import *
        from goflux.codecs import Gzip
        assert Gzip().decode(Gzip().encode(b"x")) == b"x"
        try:
            {make}
        except MissingDependency as exc:
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == message
