"""The Spark adapter over Spark Connect, against a real Connect server.

Each job runs in its own client process (tests/spark/connect_job.py): PySpark lets a
process hold a classic session or Connect sessions, not both.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from goflux import JsonCodec
from goflux.codecs import Gzip, MsgpackCodec, Zstd, pipe
from goflux.testing import NatsServer, SparkConnectServer
from tests.spark.helpers import (
    Sale,
    bodies,
    fetch_all,
    forget_commit,
    make_stream,
    message_ids,
    needs_admission_control,
    publish,
    sale,
    stream_state,
)

if TYPE_CHECKING:
    from tests.conftest import ConnectServers

pytestmark = [pytest.mark.spark, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
SOURCE, OUT = "SALES", "OUT"


def job(server: SparkConnectServer, nats: NatsServer, name: str, **args: Any) -> dict[str, Any]:
    """Run one connect_job in a client process; return what it printed."""
    argv = [sys.executable, "-m", "tests.spark.connect_job", server.url, nats.url, name]
    done = subprocess.run(
        [*argv, json.dumps(args)],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stderr[-4000:]}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_server_that_died_is_replaced_for_the_next_test(
    connect_servers: ConnectServers,
) -> None:
    # First in the module: the tests after it run on the server started here.
    server = connect_servers.get()
    started = connect_servers.started
    assert connect_servers.get() is server  # alive and listening: the same one
    for process in server._resources.processes:  # as if the OOM killer took the JVM
        process.popen.kill()
        process.popen.wait()

    fresh = connect_servers.get()
    assert fresh is not server
    assert connect_servers.started == started + 1
    assert not server.running
    assert connect_servers.answers(fresh)


@needs_admission_control
def test_source_reads_everything_once_across_a_restart(
    connect_server: SparkConnectServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    publish(nats_server.url, SOURCE, [sale(n) for n in range(1_000)])
    assert job(connect_server, nats_server, "read", starting=401) == {
        "n": 600,
        "d": 600,
        "lo": 401,
        "hi": 1_000,
        "first_id": "s-400",
    }
    where = {"out": str(tmp_path / "out"), "checkpoint": str(tmp_path / "checkpoint")}
    first = job(connect_server, nats_server, "source", per_trigger=400, **where)
    assert first == {"batches": 3, "n": 1_000, "d": 1_000, "lo": 1}

    publish(nats_server.url, SOURCE, [sale(n) for n in range(1_000, 1_500)])
    second = job(connect_server, nats_server, "source", per_trigger=400, **where)
    # The restarted query read only the 500 new messages, in two batches.
    assert second == {"batches": 2, "n": 1_500, "d": 1_500, "lo": 1}


@needs_admission_control
def test_foreach_batch_sink_replay_publishes_nothing_new(
    connect_server: SparkConnectServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(1_500)])
    make_stream(url, OUT)
    checkpoint = tmp_path / "checkpoint"
    args = {"per_trigger": 500, "ids": "key", "via": "foreach", "checkpoint": str(checkpoint)}

    first = job(connect_server, nats_server, "sink", **args)
    # The batches ran in the server's foreachBatch process; history comes from there.
    assert first["error"] is None
    assert first["history"] == [[0, 500, 0], [1, 500, 0], [2, 500, 0]]
    assert stream_state(url, OUT) == (1_500, 1, 1_500)

    forget_commit(checkpoint, 2)  # as if the server died before committing batch 2
    replay = job(connect_server, nats_server, "sink", **args)
    assert replay["error"] is None
    assert replay["history"] == [[2, 500, 500]]  # all 500 sent again, all duplicates
    assert stream_state(url, OUT) == (1_500, 1, 1_500)
    assert sorted(message_ids(url, OUT)) == sorted(f"s-{n}" for n in range(1_500))


@needs_admission_control
def test_positional_ids_need_a_prefix_on_connect(
    connect_server: SparkConnectServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(600)])
    make_stream(url, OUT)
    args: dict[str, Any] = {"per_trigger": 300, "via": "foreach"}

    refused = job(
        connect_server,
        nats_server,
        "sink",
        ids="positional",
        checkpoint=str(tmp_path / "a"),
        **args,
    )
    assert "not available on Spark Connect" in refused["error"]
    assert "pass key_column= (a column naming each row) or id_prefix=" in refused["error"]
    assert refused["history"] == []
    assert stream_state(url, OUT)[0] == 0  # refused before anything was published

    prefixed = job(
        connect_server,
        nats_server,
        "sink",
        ids="prefix",
        prefix="orders-v1",
        checkpoint=str(tmp_path / "b"),
        **args,
    )
    assert prefixed["error"] is None
    assert prefixed["history"] == [[0, 300, 0], [1, 300, 0]]
    ids = message_ids(url, OUT)
    assert len(set(ids)) == 600
    assert {i.rsplit(":", 2)[0] for i in ids} == {"orders-v1:0", "orders-v1:1"}


@needs_admission_control
def test_write_stream_sink_knows_its_query_and_deduplicates_a_replay(
    connect_server: SparkConnectServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(1_000)])
    make_stream(url, OUT)
    checkpoint = tmp_path / "checkpoint"
    args = {"per_trigger": 500, "ids": "positional", "via": "write_stream"}

    assert (
        job(connect_server, nats_server, "sink", checkpoint=str(checkpoint), **args)["error"]
        is None
    )
    stored = message_ids(url, OUT)
    queries = {i.split(":")[0] for i in stored}
    assert len(stored) == len(set(stored)) == 1_000
    assert len(queries) == 1
    assert {i.split(":")[1] for i in stored} == {"0", "1"}

    forget_commit(checkpoint, 1)
    assert (
        job(connect_server, nats_server, "sink", checkpoint=str(checkpoint), **args)["error"]
        is None
    )
    assert stream_state(url, OUT) == (1_000, 1, 1_000)
    codec = JsonCodec(Sale)
    assert sorted(bodies(url, OUT)) == sorted(codec.encode(sale(n)) for n in range(1_000))


def test_run_micro_batches_feeds_a_connect_session(
    connect_server: SparkConnectServer, nats_server: NatsServer
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(400)])
    make_stream(url, OUT)
    result = job(connect_server, nats_server, "micro_batches", max_messages=200, batches=2)
    assert result == {
        "batches": 2,
        "messages": 400,
        "counts": [200, 200],
        "history": [[0, 200, 0], [1, 200, 0]],
    }
    assert stream_state(url, OUT) == (400, 1, 400)


def test_codecs_travel_to_the_server_for_the_source_and_the_sinks(
    connect_server: SparkConnectServer, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    values = [sale(n) for n in range(200)]
    publish(url, SOURCE, values, codec=pipe(MsgpackCodec(Sale), Gzip()))
    make_stream(url, OUT)
    result = job(connect_server, nats_server, "codecs", checkpoint=str(tmp_path / "checkpoint"))
    assert result == {
        "columns": [*Sale.model_fields, "subject", "stream", "seq", "timestamp"],
        "published": 200,
        "ids": sorted(value.id for value in values),
        "amount": sum(value.amount for value in values),
        "quantity": sum(line.quantity for value in values for line in value.lines),
    }
    fetched = fetch_all(url, OUT, "out.sales", pipe(MsgpackCodec(Sale), Zstd()), 200)
    assert sorted(fetched, key=lambda value: value.id) == sorted(values, key=lambda v: v.id)
