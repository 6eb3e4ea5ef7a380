"""The goflux command line against a real server."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import nats
import pytest

from goflux import BytesCodec
from goflux.cli import main
from goflux.testing import NatsServer
from goflux.transports import jetstream


def goflux(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goflux", *args],
        capture_output=True,
        text=True,
        timeout=30,  # below the test's 60 s, so that a hang shows the command's output
        env=env,
        check=False,
    )


def test_streams_and_consumers_show_counts_and_lag(
    nats_server: NatsServer, capsys: pytest.CaptureFixture[str]
) -> None:
    async def fill() -> None:
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        await jetstream.ensure_stream(js, name="ORDERS", subjects=["orders.>"])
        await jetstream.ensure_consumer(js, stream="ORDERS", name="billing")
        for n in range(7):
            await js.publish("orders.new", str(n).encode())
        await jetstream.ensure_stream(
            js, name="COUNTS", subjects=["counts.>"], allow_msg_counter=True
        )
        await jetstream.ensure_stream(
            js,
            name="EVENTS",
            subjects=["events.>"],
            allow_msg_schedules=True,
            allow_batched=True,
            allow_atomic=True,
            allow_msg_ttl=True,
            subject_delete_marker_ttl=60,
            max_age=7200,
        )
        await nc.close()

    asyncio.run(fill())
    assert main(["streams", "--url", nats_server.url]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == [
        "stream",
        "subjects",
        "messages",
        "bytes",
        "first",
        "last",
        "consumers",
        "settings",
    ]
    assert [line.split()[0] for line in lines[1:]] == ["COUNTS", "EVENTS", "ORDERS"]
    assert lines[1].split()[-1] == "counters"
    assert lines[2].split()[-1] == "schedules,batched,atomic,msg_ttl,max_age=2h,markers=1m"
    name, subjects, messages, _, first, last, consumers, settings = lines[3].split()
    assert (name, subjects, messages, first, last, consumers, settings) == (
        "ORDERS", "orders.>", "7", "1", "7", "1", "-"
    )  # fmt: skip
    assert main(["consumers", "--url", nats_server.url, "ORDERS"]) == 0
    row = capsys.readouterr().out.splitlines()[1].split()
    assert row[:2] == ["ORDERS", "billing"]
    assert row[2:] == ["-", "7", "0", "0", "0"]  # no filter; lag 7; nothing delivered yet


def test_kv_shows_ttls(nats_server: NatsServer, capsys: pytest.CaptureFixture[str]) -> None:
    async def make() -> None:
        nc = await nats.connect(nats_server.url)
        js = nc.jetstream()
        kv = await jetstream.key_value(js, "sessions", BytesCodec(), ttl=3600, limit_marker_ttl=90)
        await kv.create("session.a", b"token", ttl=120)
        await kv.put("plain", b"kept")
        await kv.create("schema", b"v1", ttl="never")
        # Another client's TTL too long for a timedelta: shown, not a crash.
        await js.publish("$KV.sessions.huge", b"v", headers={"Nats-TTL": "100000000000000"})
        await jetstream.key_value(js, "config", BytesCodec())
        await nc.close()

    asyncio.run(make())
    url = ["kv", "--url", nats_server.url]
    assert main([*url, "ls"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "config  keys=0  writes=0",
        "sessions  keys=4  writes=4  ttl=1h  markers=90s",
    ]
    assert main([*url, "get", "sessions", "session.a"]) == 0
    got = capsys.readouterr()
    assert got.out == "token"
    assert re.fullmatch(r"revision 1, \S+, expires in (119|120)s \(ttl 2m\)\n", got.err), got.err
    assert main([*url, "get", "sessions", "plain"]) == 0
    assert "expires" not in capsys.readouterr().err
    assert main([*url, "get", "sessions", "schema"]) == 0
    assert re.fullmatch(
        r"revision 3, \S+, ttl never \(kept past the bucket's ttl\)\n", capsys.readouterr().err
    )
    assert main([*url, "get", "sessions", "huge"]) == 0
    assert re.fullmatch(
        r"revision 4, \S+, ttl never \(kept past the bucket's ttl\)\n", capsys.readouterr().err
    )


@pytest.mark.slow
def test_unreachable_server_gives_a_clear_error() -> None:
    result = goflux("streams", "--url", "nats://127.0.0.1:1")
    assert result.returncode == 2
    assert result.stderr.startswith("goflux streams: OSError: cannot reach a NATS server at")
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_a_refused_connection_prints_the_servers_reason(tmp_path: Path) -> None:
    with NatsServer(jetstream=True, args=["--user", "u", "--pass", "right"]) as server:
        result = goflux("streams", "--url", f"nats://u:wrong@127.0.0.1:{server.port}")
    assert result.returncode == 2
    assert result.stderr.strip() == (
        f"goflux streams: OSError: the NATS server at nats://***@127.0.0.1:{server.port} "
        "refused the connection: Authorization Violation"
    )

    conf = tmp_path / "one.conf"
    conf.write_text("listen: 127.0.0.1:-1\nmax_connections: 1\n")
    with NatsServer(jetstream=False, args=["-c", str(conf)]) as server:

        async def with_the_only_connection_taken() -> subprocess.CompletedProcess[str]:
            nc = await nats.connect(server.url)
            try:
                return await asyncio.to_thread(goflux, "streams", "--url", server.url)
            finally:
                await nc.close()

        result = asyncio.run(with_the_only_connection_taken())
    assert result.returncode == 2
    assert result.stderr.strip().endswith("refused the connection: maximum connections exceeded")
    assert "Traceback" not in result.stderr
    assert "never retrieved" not in result.stderr


def test_server_runs_in_the_foreground_until_interrupted(tmp_path: Path) -> None:
    store = tmp_path / "store"
    # Port 0: the server picks a free one itself and the first line says which (a port
    # picked here and handed over could be taken by another test's server meanwhile).
    with subprocess.Popen(
        [sys.executable, "-m", "goflux", "server", "--port", "0", "--store", str(store)],
        stdout=subprocess.PIPE,
        text=True,
    ) as process:
        assert process.stdout is not None
        first = process.stdout.readline()  # printed once the server is ready
        found = re.match(r"nats-server with JetStream on nats://127\.0\.0\.1:(\d+),", first)
        assert found is not None, first
        free = int(found.group(1))
        assert free != 0

        async def use() -> int:
            nc = await nats.connect(f"nats://127.0.0.1:{free}")
            js = nc.jetstream()
            await jetstream.ensure_stream(js, name="DEV", subjects=["dev.>"])
            ack = await js.publish("dev.x", b"1")
            await nc.close()
            return ack.seq

        assert asyncio.run(use()) == 1
        process.send_signal(signal.SIGINT)
        assert process.wait(timeout=20) == 0
        assert "stopped" in process.stdout.read()
    assert any(store.rglob("*"))  # the store is kept


@pytest.mark.slow  # a CLI child process
def test_demo_without_java_says_what_to_install() -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("JAVA_HOME", "NATS_URL")}
    env["PATH"] = str(Path(sys.executable).parent)  # no java here
    result = goflux("demo", "--orders", "20", env=env)
    assert result.returncode == 2
    assert "needs Java 17 or newer" in result.stderr
    assert "Traceback" not in result.stderr


def test_demo_refuses_too_few_orders() -> None:
    result = goflux("demo", "--orders", "5")
    assert result.returncode == 2
    assert "at least 13 orders" in result.stderr


@pytest.mark.slow  # a CLI child process (tests/service/test_run_options.py: in-process)
def test_run_refuses_a_negative_quarantine_count() -> None:
    result = goflux("run", "app:service", "--workers", "2", "--quarantine-after", "-1")
    assert result.returncode == 2
    assert "--quarantine-after: must be >= 0, got -1" in result.stderr


@pytest.mark.slow
def test_demo_with_an_unreachable_server_says_so_at_once() -> None:
    env = {**os.environ, "NATS_URL": "nats://127.0.0.1:1"}
    result = goflux("demo", "--orders", "13", env=env)
    assert result.returncode == 2
    assert "cannot connect to NATS at nats://127.0.0.1:1" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow  # ten CLI child processes
def test_kv_put_get_ls_and_clear_errors(nats_server: NatsServer) -> None:
    async def make() -> None:
        nc = await nats.connect(nats_server.url)
        await jetstream.key_value(nc.jetstream(), "config", jetstream_bytes(), history=3)
        await nc.close()

    asyncio.run(make())
    url = ["--url", nats_server.url]
    put = goflux("kv", *url, "put", "config", "feature.dark", "on")
    assert (put.returncode, put.stdout.strip()) == (0, "1")
    assert goflux("kv", *url, "put", "config", "feature.beta", "off").returncode == 0
    got = goflux("kv", *url, "get", "config", "feature.dark")
    assert (got.returncode, got.stdout) == (0, "on")  # piped: the bytes as stored
    assert got.stderr.startswith("revision 1, ")
    listed = goflux("kv", *url, "ls", "config")
    assert sorted(listed.stdout.split()) == ["feature.beta", "feature.dark"]
    buckets = goflux("kv", *url, "ls")
    assert buckets.stdout.split() == ["config", "keys=2", "writes=2"]
    missing_key = goflux("kv", *url, "get", "config", "nope")
    assert missing_key.returncode == 1
    assert missing_key.stderr.strip() == "goflux kv: key 'nope' not found in bucket 'config'"
    missing_bucket = goflux("kv", *url, "get", "nobucket", "k")
    assert missing_bucket.returncode == 2
    assert missing_bucket.stderr.strip() == (
        "goflux kv: BucketNotFound: bucket 'nobucket' not found"
    )
    bad_bucket = goflux("kv", *url, "get", "a.b", "k")
    assert bad_bucket.returncode == 2
    assert "InvalidKey: invalid bucket name 'a.b'" in bad_bucket.stderr
    bad_key = goflux("kv", *url, "put", "config", "a..b", "x")
    assert bad_key.returncode == 2
    assert "InvalidKey" in bad_key.stderr
    unreachable = goflux("kv", "--url", "nats://127.0.0.1:1", "ls")
    assert unreachable.returncode == 2
    assert "cannot reach a NATS server at nats://127.0.0.1:1" in unreachable.stderr


def test_kv_watch_prints_changes_until_interrupted(nats_server: NatsServer) -> None:
    async def make() -> None:
        nc = await nats.connect(nats_server.url)
        kv = await jetstream.key_value(nc.jetstream(), "flags", jetstream_bytes())
        await kv.put("a", b"1")
        await nc.close()

    asyncio.run(make())
    with subprocess.Popen(
        [sys.executable, "-m", "goflux", "kv", "--url", nats_server.url, "watch", "flags"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as watcher:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().split() == ["1", "a", "put", "1"]  # the latest

        async def change() -> None:
            nc = await nats.connect(nats_server.url)
            kv = jetstream.KeyValue(nc.jetstream(), "flags", jetstream_bytes())
            await kv.put("b", b"2")
            await kv.delete("a")
            await nc.close()

        asyncio.run(change())
        assert watcher.stdout.readline().split() == ["2", "b", "put", "2"]
        assert watcher.stdout.readline().split() == ["3", "a", "delete", "-"]
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=30)
    assert watcher.returncode == 130


@pytest.mark.slow  # a CLI child, and the TTL's second
def test_kv_watch_shows_why_the_server_purged_a_key(nats_server: NatsServer) -> None:
    async def make() -> None:
        nc = await nats.connect(nats_server.url)
        kv = await jetstream.key_value(nc.jetstream(), "tokens", BytesCodec(), limit_marker_ttl=30)
        await kv.put("ready", b"r")
        await nc.close()

    async def expiring() -> None:
        nc = await nats.connect(nats_server.url)
        kv = await jetstream.key_value(nc.jetstream(), "tokens", BytesCodec())
        await kv.create("t", b"x", ttl=1)
        await nc.close()

    asyncio.run(make())
    with subprocess.Popen(
        [sys.executable, "-m", "goflux", "kv", "--url", nats_server.url, "watch", "tokens"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as watcher:
        assert watcher.stdout is not None
        assert watcher.stdout.readline().split() == ["1", "ready", "put", "r"]  # watching
        asyncio.run(expiring())
        assert watcher.stdout.readline().split() == ["2", "t", "put", "x"]
        # About a second later, the server's limit marker: a purge, and why.
        assert watcher.stdout.readline().split() == ["3", "t", "purge(MaxAge)", "-"]
        watcher.send_signal(signal.SIGINT)
        watcher.wait(timeout=30)
    assert watcher.returncode == 130


def jetstream_bytes() -> BytesCodec:
    return BytesCodec()


@pytest.mark.slow  # five CLI child processes
def test_obj_put_ls_get_and_clear_errors(nats_server: NatsServer, tmp_path: Path) -> None:
    async def make() -> None:
        nc = await nats.connect(nats_server.url)
        await jetstream.object_store(nc.jetstream(), "files")
        await nc.close()

    asyncio.run(make())
    source = tmp_path / "report.bin"
    source.write_bytes(bytes(range(256)) * 2000)  # 512,000 bytes: 4 chunks
    url = ["--url", nats_server.url]
    put = goflux("obj", *url, "put", "files", str(source))
    assert put.returncode == 0, put.stderr
    assert put.stdout.split()[:5] == ["report.bin", "512000", "bytes", "in", "4"]
    listed = goflux("obj", *url, "ls", "files")
    assert listed.stdout.split()[:2] == ["report.bin", "512000"]
    out = tmp_path / "copy.bin"
    got = goflux("obj", *url, "get", "files", "report.bin", "--out", str(out))
    assert got.returncode == 0, got.stderr
    assert out.read_bytes() == source.read_bytes()
    missing = goflux("obj", *url, "get", "files", "nope", "--out", str(tmp_path / "x"))
    assert missing.returncode == 2
    assert "ObjectNotFound" in missing.stderr
    assert "'nope'" in missing.stderr
    assert not (tmp_path / "x").exists()
    no_bucket = goflux("obj", *url, "ls", "nobucket")
    assert no_bucket.returncode == 2
    assert "BucketNotFound" in no_bucket.stderr


def test_a_reader_that_goes_away_ends_the_command_quietly(
    nats_server: NatsServer, tmp_path: Path
) -> None:
    async def make() -> None:
        nc = await nats.connect(nats_server.url)
        store = await jetstream.object_store(nc.jetstream(), "files")
        await store.put("big", bytes(5_000_000))
        await nc.close()

    asyncio.run(make())
    command = (
        f"{sys.executable} -m goflux obj --url {nats_server.url} get files big | head -c 10"
        " > /dev/null; echo ${PIPESTATUS[0]}"
    )
    done = subprocess.run(
        ["bash", "-c", command], capture_output=True, text=True, timeout=30, check=False
    )
    assert done.stdout.strip() == "0"
    assert done.stderr == ""
