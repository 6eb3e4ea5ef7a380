"""A command whose extra is missing says in one line what to install; ``--version``."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import textwrap
import tomllib
from importlib.metadata import version

import pytest

import goflux
from goflux.cli import _main, _needs
from goflux.cli import main as goflux_main
from tests.processes import ROOT

# Run in a child: optional modules made unimportable, as on an install without the
# extra; the nats-server binary not found unless SERVER is set.
BLOCKED = """
import sys

class Missing:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCK or name in BLOCK:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

BLOCK = set(sys.argv[1].split(",")) - {""}
sys.meta_path.insert(0, Missing())
if sys.argv[2] != "server":
    import goflux.testing

    def find_nats_server(binary=None):
        raise goflux.testing.NatsServerNotFound("nats-server binary not found")

    goflux.testing.find_nats_server = find_nats_server
from goflux.cli import main

sys.exit(main(sys.argv[3:]))
"""


def goflux_without(
    blocked: str, *args: str, server: bool = True
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("NATS_URL", "NATS_SERVER_BIN")}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(BLOCKED), blocked, "server" if server else "-",
         *args],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
        check=False,
    )  # fmt: skip


def test_the_demo_without_its_extras_names_them_in_one_line() -> None:
    result = goflux_without("nats,pyspark,opentelemetry.sdk", "demo", server=False)
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == (
        "goflux demo needs the extras 'nats', 'otel', 'server' and 'spark': "
        "pip install 'goflux[nats,otel,server,spark]' "
        "(or nats-server on PATH, or $NATS_SERVER_BIN set to one)\n"
    )


@pytest.mark.slow  # a CLI child process
def test_the_demo_names_only_what_is_missing() -> None:
    result = goflux_without("pandas", "demo", "--url", "nats://127.0.0.1:1")
    assert (result.returncode, result.stderr) == (
        2,
        "goflux demo needs the 'spark' extra: pip install 'goflux[spark]'\n",
    )


@pytest.mark.parametrize(
    ("blocked", "args", "line"),
    [
        ("nats", ["streams"], "goflux streams needs the 'nats' extra: pip install 'goflux[nats]'"),
        # A child process each: the first case is the fast tier's, the others go slow.
        pytest.param(
            "nats",
            ["kv", "ls"],
            "goflux kv needs the 'nats' extra: pip install 'goflux[nats]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "nats",
            ["obj", "ls"],
            "goflux obj needs the 'nats' extra: pip install 'goflux[nats]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "nats",
            ["services"],
            "goflux services needs the 'nats' extra: pip install 'goflux[nats]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "watchfiles",
            ["run", "app:service", "--reload"],
            "goflux run --reload needs the 'service' extra: pip install 'goflux[service]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "uvicorn,watchfiles",
            ["run", "app:service", "--reload", "--health-port", "0"],
            "goflux run --health-port --reload needs the 'service' extra: "
            "pip install 'goflux[service]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "yaml",
            ["asyncapi", "app:service", "--format", "yaml"],
            "goflux asyncapi --format yaml needs the 'asyncapi' extra: "
            "pip install 'goflux[asyncapi]'",
            marks=pytest.mark.slow,
        ),
        pytest.param(
            "uvicorn",
            ["asyncapi", "app:service", "--serve"],
            "goflux asyncapi --serve needs the 'asyncapi' extra: pip install 'goflux[asyncapi]'",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_a_command_without_its_extra_says_which_to_install(
    blocked: str, args: list[str], line: str
) -> None:
    result = goflux_without(blocked, *args)
    assert (result.returncode, result.stdout, result.stderr) == (2, "", line + "\n")


@pytest.mark.slow  # a CLI child process
def test_the_server_command_without_a_binary_names_the_extra() -> None:
    result = goflux_without("", "server", server=False)
    assert result.returncode == 2
    assert result.stderr.startswith(
        "goflux server needs the 'server' extra: pip install 'goflux[server]' (or nats-server"
    )


@pytest.mark.slow  # a CLI child process
def test_run_needs_no_extra_without_reload_or_health_probes() -> None:
    result = goflux_without("uvicorn,watchfiles", "run", "no_such_module:service")
    assert result.returncode == 2
    assert "cannot load no_such_module:service" in result.stderr
    assert "extra" not in result.stderr
    assert "Traceback" not in result.stderr


def test_an_import_error_the_table_missed_still_names_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def inspect(_: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'pyspark'", name="pyspark")

    monkeypatch.setattr(_main, "_inspect", inspect)
    assert goflux_main(["streams"]) == 2
    assert capsys.readouterr().err == (
        "goflux streams needs the 'spark' extra (pyspark is not installed): "
        "pip install 'goflux[spark]'\n"
    )

    def other(_: argparse.Namespace) -> int:
        raise ModuleNotFoundError("No module named 'app_helpers'", name="app_helpers")

    monkeypatch.setattr(_main, "_inspect", other)
    with pytest.raises(ModuleNotFoundError):  # not an extra of ours: the traceback helps
        goflux_main(["streams"])


def test_missing_dependency_is_printed_as_it_says(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def inspect(_: argparse.Namespace) -> int:
        raise goflux.MissingDependency("X needs y, which is not installed: pip install 'goflux[z]'")

    monkeypatch.setattr(_main, "_inspect", inspect)
    assert goflux_main(["consumers"]) == 2
    assert capsys.readouterr().err == (
        "goflux consumers: X needs y, which is not installed: pip install 'goflux[z]'\n"
    )


def test_every_need_names_a_real_extra() -> None:
    with (ROOT / "pyproject.toml").open("rb") as file:
        extras = tomllib.load(file)["project"]["optional-dependencies"]
    named = {need.extra for needs in _needs.NEEDS.values() for need in needs}
    assert named <= set(extras)
    commands = _main._parser()._subparsers._group_actions[0].choices
    assert set(_needs.NEEDS) <= set(commands)


@pytest.mark.slow  # a CLI child; test_version_says_not_installed runs in-process
def test_version_lists_goflux_and_the_libraries_it_runs_with() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "goflux", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    lines = result.stdout.splitlines()
    assert lines[0] == f"goflux {goflux.__version__}"
    assert lines[1].startswith(f"Python {sys.version.split()[0]} ")
    assert lines[7] == "codecs"  # the group's heading: the codecs' libraries follow, indented
    shown = dict(line.split(maxsplit=1) for line in lines[2:7])
    assert list(shown) == [
        "nats-py",
        "pydantic",
        "opentelemetry-api",
        "opentelemetry-sdk",
        "pyspark",
    ]
    assert shown["pydantic"] == version("pydantic")
    assert shown["nats-py"] == version("nats-py")
    assert all(line.startswith("  ") for line in lines[8:])
    codecs = dict(line.split(maxsplit=1) for line in lines[8:])
    # The dev install has every codec's library (goflux[codecs]); Zstandard's backport
    # only before Python 3.14, whose standard library has it.
    expected = ["ormsgpack", "msgpack", "ruamel.yaml", "tomli-w", "defusedxml"]
    expected += ["backports.zstd"] if sys.version_info < (3, 14) else []
    assert list(codecs) == [*expected, "brotli", "cramjam"]
    assert codecs["ormsgpack"] == version("ormsgpack")
    assert codecs["ruamel.yaml"] == version("ruamel.yaml")
    # Every version starts in one column.
    assert len({len(line) - len(line.split()[-1]) for line in lines[2:] if line != "codecs"}) == 1


def test_version_says_not_installed(monkeypatch: pytest.MonkeyPatch) -> None:
    from goflux.cli import _version  # noqa: PLC0415

    monkeypatch.setattr(_version, "DISTRIBUTIONS", ("pydantic", "no-such-distribution"))
    monkeypatch.setattr(_version, "CODEC_DISTRIBUTIONS", ("no-such-codec", "msgpack"))
    assert _version.version_text().splitlines()[2:] == [
        f"pydantic              {version('pydantic')}",
        "no-such-distribution  not installed",
        "codecs",
        f"  msgpack             {version('msgpack')}",  # only the installed ones
    ]
    monkeypatch.setattr(_version, "CODEC_DISTRIBUTIONS", ("no-such-codec",))
    assert _version.version_text().splitlines()[4:] == ["codecs                none installed"]
