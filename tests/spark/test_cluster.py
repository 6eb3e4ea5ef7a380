"""The source and the sinks on a real standalone cluster: executors in their own JVMs.

A master and one worker (2 cores, 1 GB for executors) run from the jars of the pyspark
wheel, on loopback; the driver is this process. Every task runs in the executor JVM the
worker starts for the session, with Python workers forked under it, so nothing reaches
the source or the sinks through shared Python state: only options, checkpoints and
NATS. The session borrows this process's one SparkContext from the local[2] session
(see conftest.py) rather than running the driver in a subprocess: that would cost
another JVM and executor start per script, and hide the sink's statistics and the
rows each batch saw behind a report the script would have to write.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, SparkSession

from goflux import JsonCodec
from goflux.testing import NatsServer, SparkProcessError, SparkStandaloneCluster
from goflux.transports import spark as gspark
from tests.spark.helpers import (
    Sale,
    bodies,
    forget_commit,
    make_stream,
    message_ids,
    needs_admission_control,
    publish,
    published_during,
    run_to_end,
    sale,
    stream_state,
)

if TYPE_CHECKING:
    from tests.spark.jvm import OneContext

# Slow: the cluster and its executor take 15-25 s to start on 2 cores, once per module.
# The first test's time includes that start-up: up to 180 s for the cluster
# (SparkStandaloneCluster's limit on a busy machine) and 120 s for the executors to
# register (spark.scheduler.maxRegisteredResourcesWaitingTime below), then its own work.
pytestmark = [pytest.mark.slow, pytest.mark.spark, pytest.mark.timeout(420)]

SOURCE, OUT = "SALES", "OUT"
ROOT = Path(__file__).resolve().parents[2]
EXECUTOR_MAIN = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"


@pytest.fixture(scope="module")
def cluster() -> Iterator[SparkStandaloneCluster]:
    # One that fails to start fails this module's tests with its SparkProcessError
    # (and its log), before they take the SparkContext from the local session.
    with SparkStandaloneCluster(workers=1, cores=2, memory="1g") as running:
        yield running


@pytest.fixture(scope="module")
def cluster_sessions(
    spark_context: OneContext, cluster: SparkStandaloneCluster
) -> Iterator[Callable[[], SparkSession]]:
    """Hands out this module's session on the cluster, made again if a test broke it."""
    conf = {
        "spark.driver.host": "127.0.0.1",  # executors connect back to the driver here
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executor.memory": "512m",
        "spark.cores.max": "2",
        # The session is ready when executors hold all of spark.cores.max, not at
        # once (standalone's default ratio is 0: the first job would wait instead).
        "spark.scheduler.minRegisteredResourcesRatio": "1.0",
        "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s",
        # Executors import goflux and the payload type (tests.spark.helpers.Sale) by
        # name, as a job ships its own code: this checkout first on their path (else
        # the checkout of the editable install, if any, which may be another one).
        "spark.executorEnv.PYTHONPATH": str(ROOT),
    }

    def make() -> SparkSession:
        session = gspark.local_session(cluster.master_url, app_name="goflux-cluster-tests", **conf)
        session.sparkContext.setLogLevel("ERROR")
        assert session.sparkContext.master == cluster.master_url
        assert session.sparkContext._jsc.sc().getExecutorIds().size() == 1
        return session

    with spark_context.borrowed(make) as current:
        yield current


@pytest.fixture
def cluster_spark(
    cluster_sessions: Callable[[], SparkSession], cluster: SparkStandaloneCluster
) -> SparkSession:
    """The cluster session; a cluster that stopped fails the test with its log."""
    if not cluster.running:
        raise SparkProcessError(f"the standalone cluster stopped:\n{cluster.log_tail()}")
    return cluster_sessions()


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def _parent(pid: int) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces and parens
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_tasks_run_in_executor_jvms_and_python_workers_of_their_own(
    cluster_spark: SparkSession, cluster: SparkStandaloneCluster
) -> None:
    def where(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        # Runs in a task (pickled by value: nested). Its own PID, and the nearest
        # ancestor that is a JVM: the process that started this Python worker.
        import os  # noqa: PLC0415
        from pathlib import Path  # noqa: PLC0415

        import pyarrow as pa  # noqa: PLC0415

        for _ in batches:
            pass
        pid = jvm = os.getpid()
        while jvm > 1:
            jvm = int(Path(f"/proc/{jvm}/stat").read_text().rsplit(")", 1)[1].split()[1])
            if Path(f"/proc/{jvm}/exe").resolve().name == "java":
                break
        yield pa.RecordBatch.from_pylist([{"pid": pid, "jvm": jvm}])

    rows = cluster_spark.range(0, 8, numPartitions=4).mapInArrow(where, "pid long, jvm long")
    seen = rows.collect()
    assert len(seen) == 4
    driver_jvm = cluster_spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()
    python_pids = {row.pid for row in seen}
    (executor,) = {row.jvm for row in seen}  # one executor: the worker's only one
    assert os.getpid() not in python_pids
    assert executor not in (driver_jvm, os.getpid())
    assert EXECUTOR_MAIN in _cmdline(executor)
    # The executor is the worker's child, running in the worker's directory for this
    # application: the cluster's, not a local one.
    assert WORKER_MAIN in _cmdline(_parent(executor))
    app = cluster_spark.sparkContext.applicationId
    assert app.startswith("app-")
    application_dir = (cluster.work_dir / "worker-0" / app).resolve()
    assert Path(f"/proc/{executor}/cwd").resolve().parent == application_dir


def _run(df: DataFrame, checkpoint: Path, sink: Callable[[DataFrame, int], None]) -> None:
    """Run an AvailableNow query into ``sink`` (a foreachBatch function) to its end."""
    run_to_end(df.writeStream.foreachBatch(sink), checkpoint)


@needs_admission_control
def test_source_reads_every_message_once_across_restarts_and_a_replay(
    cluster_spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(10_000)])
    df = gspark.read_stream(
        cluster_spark, Sale, servers=url, stream=SOURCE, max_messages_per_trigger=4_000
    )
    checkpoint = tmp_path / "checkpoint"
    calls: list[tuple[int, list[tuple[int, str]]]] = []

    def keep(batch: DataFrame, batch_id: int) -> None:
        rows = batch.select("seq", "id").collect()  # read by the executor's tasks
        calls.append((batch_id, sorted((row.seq, row.id) for row in rows)))

    _run(df, checkpoint, keep)
    publish(url, SOURCE, [sale(n) for n in range(10_000, 15_000)])
    _run(df, checkpoint, keep)  # a restart: only what is new
    forget_commit(checkpoint, 4)  # as if the driver died before committing batch 4
    publish(url, SOURCE, [sale(n) for n in range(15_000, 16_000)])
    _run(df, checkpoint, keep)  # batch 4 again, then what is new

    assert [(batch_id, len(rows)) for batch_id, rows in calls] == [
        (0, 4_000),
        (1, 4_000),
        (2, 2_000),
        (3, 4_000),
        (4, 1_000),
        (4, 1_000),  # the replay: its range is in the checkpoint, not what exists now
        (5, 1_000),
    ]
    assert calls[4] == calls[5]  # the same messages, not merely as many
    once = [row for batch_id, rows in calls[:5] + calls[6:] for row in rows]
    assert once == [(n + 1, f"s-{n}") for n in range(16_000)]  # none lost, none twice


@needs_admission_control
def test_foreach_batch_publisher_replay_publishes_only_duplicates(
    cluster_spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(3_000)])
    make_stream(url, OUT)
    df = gspark.read_stream(
        cluster_spark, Sale, servers=url, stream=SOURCE, max_messages_per_trigger=1_000
    )
    publisher = gspark.foreach_batch_publisher(
        servers=url, subject="out.sales", codec=JsonCodec(Sale)
    )
    checkpoint = tmp_path / "checkpoint"
    _run(df, checkpoint, publisher)
    assert [(s.batch_id, s.published, s.duplicates) for s in publisher.history] == [
        (0, 1_000, 0),
        (1, 1_000, 0),
        (2, 1_000, 0),
    ]
    assert stream_state(url, OUT) == (3_000, 1, 3_000)
    stored = message_ids(url, OUT)

    forget_commit(checkpoint, 2)
    replayed = published_during(url, "out.sales", lambda: _run(df, checkpoint, publisher))
    assert publisher.last == gspark.SinkStats(batch_id=2, published=1_000, duplicates=1_000)
    sent = [(msg.headers or {}).get("Nats-Msg-Id", "") for msg in replayed]
    assert len(sent) == len(set(sent)) == 1_000
    assert set(sent) == {i for i in stored if i.split(":")[1] == "2"}
    assert stream_state(url, OUT) == (3_000, 1, 3_000)
    codec = JsonCodec(Sale)
    assert sorted(bodies(url, OUT)) == sorted(codec.encode(sale(n)) for n in range(3_000))


@needs_admission_control
def test_stream_sink_replay_publishes_only_duplicates(
    cluster_spark: SparkSession, nats_server: NatsServer, tmp_path: Path
) -> None:
    url = nats_server.url
    publish(url, SOURCE, [sale(n) for n in range(1_500)])
    make_stream(url, OUT)
    df = gspark.read_stream(
        cluster_spark, Sale, servers=url, stream=SOURCE, max_messages_per_trigger=500
    )
    checkpoint = tmp_path / "checkpoint"

    def run_sink() -> None:
        writer = gspark.write_stream(df, servers=url, subject="out.sales", codec=JsonCodec(Sale))
        run_to_end(writer, checkpoint)

    run_sink()
    assert stream_state(url, OUT) == (1_500, 1, 1_500)
    stored = message_ids(url, OUT)
    assert len(set(stored)) == 1_500
    assert {i.split(":")[1] for i in stored} == {"0", "1", "2"}

    forget_commit(checkpoint, 2)
    replayed = published_during(url, "out.sales", run_sink)
    sent = [(msg.headers or {}).get("Nats-Msg-Id", "") for msg in replayed]
    assert len(sent) == len(set(sent)) == 500
    assert set(sent) == {i for i in stored if i.split(":")[1] == "2"}
    assert stream_state(url, OUT) == (1_500, 1, 1_500)
    codec = JsonCodec(Sale)
    assert sorted(bodies(url, OUT)) == sorted(codec.encode(sale(n)) for n in range(1_500))
