"""The benchmark runner's smoke mode: every case still runs and the report is complete."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

TITLES = (
    "Encode the 10-field model",
    "In-process publish -> handler",
    "JetStream publish, waiting for each PubAck",
    "JetStream pipelined publish",
    "JetStream consume with ack, typed handler",
    "JetStream consume, plain vs confirmed acks",
    "End-to-end latency at 1,000 msg/s",
    "Memory: a consumer holding",
    "Spark source: typed rows/s",
    "Spark sink: messages/s",
    "Spark micro-batch overhead",
)
CASES = (
    "raw fetch(100) + ack",
    "goflux, no-op telemetry providers",
    "goflux, SDK telemetry (spans + metrics)",
    "FastStream pull subscriber (batch 100)",
    "FastStream push subscriber",
    "FastStream broker.publish(stream=)",
    "goflux Publisher + Subscriber",
    "goflux Subscriber.stream",
    "raw callback pull + ack_sync()",
    "goflux Subscriber, plain acks",
    "goflux Subscriber, confirm_acks=True",
)
GOALS = (
    "consume with ack (typed) vs raw callback pull",
    "consume vs FastStream, its default setup",
    "consume vs FastStream, its fastest setup",
    "cost of no-op telemetry per consumed message",
    "publish vs raw js.publish",
    "pipelined publish vs raw publish_async",
    "latency p50 at 1,000 msg/s over raw",
    "Spark source vs raw read",
    "Spark sink vs raw publish",
    "Spark micro-batch overhead",
)


@pytest.mark.spark  # the smoke run includes the Spark suite
@pytest.mark.timeout(300)
def test_smoke_run_reports_every_table_goal_and_chart(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    report = (tmp_path / "report.md").read_text()
    assert "## Goals" in result.stdout  # the report is printed too
    for title in TITLES:
        assert f"### {title}" in report, title
    for case in CASES:
        assert f"| {case} |" in report, case
    assert "## Goals" in report
    assert "Smoke run" in report
    goal_rows = re.findall(r"^\| (.+?) \| [<>]= .+? \| .+? \| (?:yes|\*\*no\*\*) \|$", report, re.M)
    for goal in GOALS:
        assert sum(row.startswith(goal) for row in goal_rows) == 1, (goal, goal_rows)
    assert len(goal_rows) == len(GOALS)
    assert re.search(r"- 2 cores|- \d+ cores", report)
    assert "load average at start" in report
    # Every measured rate is a positive number.
    rates = re.findall(r"^\| [^|]+ \| ([\d,]+) \| [\d,]+ \| [\d,]+ \| [\d.]+ \|", report, re.M)
    assert len(rates) >= 25
    assert all(int(rate.replace(",", "")) > 0 for rate in rates)
    assert (tmp_path / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_unknown_suite_is_refused() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "bench", "--only", "codecs,kafka"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert "unknown suite(s) ['kafka']" in result.stderr
