"""Every example runs, as a user would run it, and prints what it promises."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from goflux.testing import NatsServer, SparkConnectServer
from tests.processes import scaled

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


# A log4j line ("26/11/24 07:19:14 WARN Utils: ...") or the JVM's own start-up notes.
SPARK_LOG_LINE = re.compile(
    r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (?:WARN|INFO|ERROR)|log4j|Using incubator modules",
    re.MULTILINE,
)


def run(name: str, env: dict[str, str] | None = None, *args: str, timeout: float = 45) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=scaled(timeout),
        env=env,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_every_example_is_covered_here() -> None:
    covered = {
        "channel_orders.py",
        "composition.py",
        "embedded_server.py",
        "fastapi_orders.py",  # run by tests/e2e/test_fastapi_example.py under uvicorn
        "feature_flags.py",
        "http_request_reply.py",
        "http_webhook.py",
        "jetstream_msgpack_gzip.py",
        "jetstream_orders.py",
        "orders_pipeline.py",
        "payments_service.py",  # run by tests/service/test_workers.py under goflux run
        "pricing_service.py",  # described by tests/asyncapi, listed by tests/cli/test_services.py
        "retry_dead_letter.py",
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} == covered


def test_channel_orders() -> None:
    out = run("channel_orders.py")
    assert out.count("audit: orders.created.") == 6
    assert "billed per worker: {'worker-1': 3, 'worker-2': 3}" in out


def test_embedded_server_starts_its_own() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    out = run("embedded_server.py", env)
    assert "embedded nats-server ready on nats://127.0.0.1:" in out
    assert "smoke.ping 'hello' id=ping-1" in out
    assert "JetStream enabled" in out


def test_embedded_server_uses_nats_url(nats_server: NatsServer) -> None:
    out = run("embedded_server.py", {**os.environ, "NATS_URL": nats_server.url})
    assert f"using the NATS server at {nats_server.url}" in out
    assert "embedded" not in out
    assert "smoke.ping 'hello' id=ping-1" in out


def test_http_webhook_answers_by_settlement() -> None:
    out = run("http_webhook.py")
    lines = out.splitlines()
    assert re.fullmatch(r"webhooks at http://127\.0\.0\.1:\d+/hooks/payments\.<event>", lines[0])
    assert lines[1:] == [
        "pay-1: the ledger is locked, the sender is asked to come back",
        "pay-1: booked 25.00 for o-1 from acme",  # retry_publish sent it again after the 503
        "pay-2: booked 10.00 for o-2 from acme",
        "pay-1: booked before, acknowledged again",
        "pay-3: refused 422 (negative amount -5.0), permanent=True",  # not retried
        "pay-4: booked 7.50 for o-4 from curl",
        "pay-4: 204",
        "undecodable: 400 bad request",
        "booked: {'pay-1': 25.0, 'pay-2': 10.0, 'pay-4': 7.5}",
    ]


def test_http_request_reply() -> None:
    out = run("http_request_reply.py")
    assert out.splitlines() == [
        "apple: ada pays 2.00",
        "apple+kiwi: remote error 404: no price for 'kiwi'",
        "pear: remote error 409: 'pear' is out of stock",
        "undecodable: 400 bad request",
        "GET: 405, allow POST",
    ]


def test_feature_flags_reconfigure_a_running_consumer() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    out = run("feature_flags.py", env)
    assert out.splitlines() == [
        "config rev 1: 0% off",
        "o-1: 100.00 at 0% (config rev 1)",
        "config rev 2: 10% off",
        "o-2: 90.00 at 10% (config rev 2)",
        "refused: expected rev 1, the key is at rev 2",
        "history: [(1, 0.0), (2, 10.0)]",
    ]


def test_jetstream_orders() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    out = run("jetstream_orders.py", env)
    assert "stored 5 orders, seq 1..5" in out
    assert "retried o-1: duplicate=True, still seq 1" in out
    assert "billed o-3 for c-1: 30.00 (stream seq 3, delivery 2)" in out
    assert "handler failed for message 3 on 'orders.created' (delivery 1; nak'd with a " in out
    assert "undecodable message 6 on 'orders.created' terminated" in out
    assert (
        "handled 5, failed 1, redelivered 1, undecodable 1; server: 0 awaiting ack, 0 pending"
        in out
    )


def test_jetstream_orders_on_a_given_server(nats_server: NatsServer) -> None:
    out = run("jetstream_orders.py", {**os.environ, "NATS_URL": nats_server.url})
    assert "handled 5" in out


MSGPACK_GZIP_READ = [
    f"read o-{n} for c-{n % 3}: 20 lines, {total}, placed 09:0{n} UTC"
    for n, total in ((1, "422.75"), (2, "471.50"), (3, "520.25"), (4, "569.00"), (5, "617.75"))
]


def test_jetstream_msgpack_gzip() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    lines = run("jetstream_msgpack_gzip.py", env).splitlines()
    assert lines[0] == "stored 5 orders as pipe(MsgpackCodec(Order), Gzip()) (application/gzip)"
    assert lines[1:6] == MSGPACK_GZIP_READ
    assert lines[6] == "read back 5 orders, equal to those sent: True"
    sizes = re.fullmatch(
        r"payload bytes: JSON (\d+), MessagePack (\d+), MessagePack \+ gzip (\d+) "
        r"\((\d+)% saved vs JSON\)",
        lines[7],
    )
    assert sizes is not None, lines[7]
    as_json, as_msgpack, packed, saved = map(int, sizes.groups())
    assert as_json > as_msgpack > packed
    assert saved == round(100 * (1 - packed / as_json))
    assert len(lines) == 8


def test_jetstream_msgpack_gzip_on_a_given_server(nats_server: NatsServer) -> None:
    out = run("jetstream_msgpack_gzip.py", {**os.environ, "NATS_URL": nats_server.url})
    assert out.splitlines()[1:7] == [
        *MSGPACK_GZIP_READ,
        "read back 5 orders, equal to those sent: True",
    ]


def test_retry_dead_letter() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    out = run("retry_dead_letter.py", env)
    for order_id, deliveries in (("o-1", 1), ("o-2", 3), ("o-3", 1), ("o-4", 3)):
        for n in range(1, deliveries + 1):
            assert f"{order_id}: delivery {n}\n" in out
        assert f"{order_id}: delivery {deliveries + 1}\n" not in out
    assert "attempts: {'o-1': 1, 'o-2': 3, 'o-3': 1, 'o-4': 3}" in out
    assert (
        "dead letter o-3: non_retryable after 1 deliveries, goflux.NonRetryable: "
        "negative amount -5.0"
    ) in out
    assert (
        "dead letter o-4: max_attempts after 3 deliveries, goflux.HandlerTimeout: "
        "handler for the message on 'payments.requested' ran longer than 0.5s"
    ) in out
    assert "invoices stored: 2" in out
    assert "first invoice id o-1:charger:invoices.created, caused by o-1" in out


def test_composition() -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    out = run("composition.py", env)
    assert "orders published: 12" in out
    assert "picks made: 24 of 24, by warehouse {'berlin': 12, 'lyon': 12}" in out
    assert "pickers at work at once: at most 4" in out
    assert "picks loaded: 24 in " in out
    assert "group drained and closed" in out


@pytest.mark.spark
@pytest.mark.timeout(270)  # the child's own limit is 240 s (both scaled by load)
def test_orders_pipeline_end_to_end(tmp_path: Path) -> None:
    """The main job, small: every promise of its summary holds, with exact numbers."""
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    summary_file = tmp_path / "summary.json"
    out = run(
        "orders_pipeline.py",
        env,
        "--orders",
        "60",
        "--master",
        "local[2]",
        "--summary-json",
        str(summary_file),
        timeout=240,
    )
    summary = json.loads(summary_file.read_text())
    # Orders 12, 25, 38 and 51 are invalid; 3, 10, 17, 24, 31, 45, 52, 59 are flaky.
    assert summary["published"] == summary["stored_once"] == 60
    assert summary["resent"] == 10  # every 6th order sent twice: the server kept one
    assert summary["invalid"] == summary["dead_lettered"] == 4
    assert summary["accepted"] == summary["valid"] == summary["aggregated_orders"] == 56
    assert summary["flaky"] == summary["flaky_accepted_after_retries"] == 8
    assert summary["transient_failures"] == 16
    assert summary["aggregated_revenue"] == summary["expected_revenue"]
    assert summary["spark_batches"] >= 2
    assert summary["results_received"] == summary["results_published"] > 0
    # One consumer span per delivery: 60 first deliveries and 16 redeliveries.
    assert summary["consumer_spans_linked"] == summary["consumer_spans"] == 60 + 16
    assert summary["hops_in_trace"] == 56
    assert summary["ok"] is True
    assert "embedded nats-server on nats://127.0.0.1:" in out
    assert re.search(r"ada\s+revenue\s+[\d.]+ from\s+11 orders", out)  # 12, one invalid
    assert out.count("[ok]") == 9
    assert "FAILED" not in out


@pytest.mark.spark
@pytest.mark.timeout(270)  # the child's own limit is 240 s (both scaled by load)
def test_the_readme_demo_command_runs_the_main_job() -> None:
    """``./scripts/demo.sh`` (the README's first command) passes options to goflux demo."""
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    result = subprocess.run(
        ["bash", str(EXAMPLES.parent / "scripts" / "demo.sh"), "--orders", "20", "--master",
         "local[2]"],
        capture_output=True,
        text=True,
        timeout=scaled(240),
        env=env,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"orders published\s+20\n", result.stdout)
    assert result.stdout.count("[ok]") == 9
    assert "\nnext steps\n" in result.stdout  # what to read, how to run the tests
    # Spark's own log lines (log4j, the JVM) stay out of the demo's output.
    assert not SPARK_LOG_LINE.search(result.stdout + result.stderr), result.stderr[-3000:]


@pytest.mark.spark
# The child's own limit is 240 s, after the Connect server's start-up (up to 180 s) if
# this test is the first to ask for it; all scaled by load.
@pytest.mark.timeout(450)
def test_the_demo_runs_its_spark_step_on_spark_connect(
    connect_server: SparkConnectServer,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "NATS_URL"}
    argv = [sys.executable, "-m", "goflux", "demo", "--orders", "20", "--remote"]
    result = subprocess.run(
        [*argv, connect_server.url], capture_output=True, text=True, timeout=scaled(240), env=env,
        check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"3. Spark on Spark Connect at {connect_server.url}:" in result.stdout
    assert re.search(r"Spark micro-batches\s+[1-9]", result.stdout)
    assert re.search(r"results published back / received\s+19 / 19\n", result.stdout)
    assert result.stdout.count("[ok]") == 9
    assert not SPARK_LOG_LINE.search(result.stdout + result.stderr), result.stderr[-3000:]
