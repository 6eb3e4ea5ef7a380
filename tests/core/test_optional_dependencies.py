"""Optional dependencies load on first use, and a missing one is a clear error.

Each case runs in a fresh interpreter in which the dependency cannot be imported
(``sys.modules[name] = None`` makes every ``import name`` fail, as on an install
without the extra).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from tests.processes import ROOT


def run_without(module: str, code: str) -> subprocess.CompletedProcess[str]:
    script = f"import sys\nsys.modules[{module!r}] = None\n" + textwrap.dedent(code)
    return subprocess.run(
        [sys.executable, "-c", script],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=30,  # below the test's 60 s
    )


def test_the_jetstream_errors_need_no_nats_py() -> None:
    done = run_without(
        "nats",
        """
        import pickle
        import goflux
        from goflux.transports import jetstream

        assert goflux.StreamNotFound is jetstream.StreamNotFound
        assert hasattr(goflux, "KeyExists")
        assert pickle.loads(pickle.dumps(goflux.BucketNotFound)) is goflux.BucketNotFound
        try:
            raise ValueError("the real problem")
        except (goflux.StreamNotFound, KeyError):
            raise AssertionError("matched")
        except ValueError:
            pass
        namespace = {}
        exec("from goflux import *", namespace)
        assert "StreamNotFound" in namespace and "Message" in namespace
        try:
            from goflux.transports.jetstream import Publisher
        except goflux.MissingDependency as exc:
            print(exc)
        """,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "goflux.transports.jetstream.Publisher needs nats-py, which is not installed: "
        "pip install 'goflux[nats]'"
    )


def test_a_health_server_without_uvicorn_says_so_and_binds_nothing() -> None:
    done = run_without(
        "uvicorn",
        """
        import asyncio, socket
        from goflux import MissingDependency
        from goflux.service._http import HttpServer

        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()

        async def main():
            server = HttpServer(lambda *args: None, "127.0.0.1", port)  # kept: no GC closes
            try:
                async with server:
                    raise AssertionError("served without uvicorn")
            except MissingDependency as exc:
                print(exc)
            with socket.create_server(("127.0.0.1", port)):  # nothing holds the port
                pass

        asyncio.run(main())
        """,
    )
    assert done.returncode == 0, done.stderr
    assert "needs uvicorn, which is not installed: pip install 'goflux[service]'" in done.stdout


def test_reload_without_watchfiles_fails_before_any_worker_starts() -> None:
    done = run_without(
        "watchfiles",
        """
        import sys
        from goflux.cli import main

        sys.exit(main(["run", "tests.service.services:idle", "--reload"]))
        """,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr == (  # one line, before anything starts (goflux/cli/_needs.py)
        "goflux run --reload needs the 'service' extra: pip install 'goflux[service]'\n"
    )
    assert "worker 1 started" not in done.stderr


@pytest.mark.slow  # two child processes
def test_the_http_transport_names_its_extra() -> None:
    for module in ("httpx", "starlette"):
        done = run_without(
            module,
            """
            import goflux
            try:
                from goflux.transports import http
            except goflux.MissingDependency as exc:
                print(exc)
            """,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == (
            f"goflux.transports.http needs {module}, which is not installed: "
            "pip install 'goflux[http]'"
        )


@pytest.mark.slow  # five child processes
def test_each_codec_names_its_extra_and_the_package_imports_without_them() -> None:
    for module, extra, codec in (
        ("ormsgpack", "msgpack", "MsgpackCodec"),
        ("msgpack", "msgpack", "MsgpackCodec"),
        ("ruamel.yaml", "yaml", "YamlCodec"),
        ("tomli_w", "toml", "TomlCodec"),
        ("defusedxml", "xml", "XmlCodec"),
    ):
        done = run_without(
            module,
            f"""
            import goflux
            from goflux import codecs

            from pydantic import BaseModel

            class Row(BaseModel):
                x: int

            codecs.CsvCodec(Row)  # the standard library's csv: always there
            try:
                codecs.{codec}(int)
            except goflux.MissingDependency as exc:
                print(exc)
            """,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == (
            f"{codec} needs {module}, which is not installed: pip install 'goflux[{extra}]'"
        )
