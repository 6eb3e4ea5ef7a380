"""A broken SparkContext fails one test: the next one gets a new JVM (tests/spark/jvm.py).

The first two tests break this process's JVM on purpose (a kill, a call interrupted
midway) and cost the tests after them a JVM start; the last runs a pytest of its own,
whose tests break theirs, to show the whole path from a failed test to the next one.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from types import FrameType

import pytest

from tests.spark.jvm import OneContext, gateway_process, healthy

pytestmark = [pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


class Interrupted(BaseException):
    """Raised by a signal handler wherever the main thread is, as pytest-timeout does."""


def test_a_dead_jvm_is_replaced_before_the_session_is_handed_out_again(
    spark_context: OneContext,
) -> None:
    session = spark_context.local()
    assert session.range(3).count() == 3
    jvm = gateway_process()
    assert jvm is not None
    discarded = spark_context.discarded

    jvm.kill()
    jvm.wait()
    assert not healthy(session)
    spark_context.failed(interrupted=False)  # what the report hook does for a failed test

    fresh = spark_context.local()
    assert fresh is not session
    assert spark_context.discarded == discarded + 1
    new_jvm = gateway_process()
    assert new_jvm is not None
    assert new_jvm.pid != jvm.pid
    assert fresh.range(5).count() == 5


def test_a_call_interrupted_midway_is_not_answered_again(spark_context: OneContext) -> None:
    session = spark_context.local()
    jvm = gateway_process()
    assert jvm is not None
    java = session.sparkContext._jvm
    assert java is not None

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGUSR1, interrupt)
    main = threading.main_thread().ident
    assert main is not None
    timer = threading.Timer(0.5, signal.pthread_kill, (main, signal.SIGUSR1))
    timer.start()
    try:
        with pytest.raises(Interrupted) as interrupted:
            java.java.lang.Thread.sleep(3_000)  # the JVM still answers it, later
    finally:
        timer.join()
        signal.signal(signal.SIGUSR1, previous)
    # While the traceback is kept (as a failed test's report keeps it), so is this
    # thread's Py4J connection, out of step: its next call reads the sleep's answer.
    # (The probe waits for it; the fixtures never probe after an interruption.)
    assert jvm.poll() is None
    assert not healthy(session)
    # A call now gets the answer to the probe's: KeyError 'p', "... does not exist
    # in the JVM", the errors that failed every later test of the run before.
    with pytest.raises(Exception):  # noqa: B017, PT011 - an answer of any shape
        session.range(3).count()
    del interrupted

    spark_context.failed(interrupted=True)
    fresh = spark_context.local()
    assert fresh is not session
    assert jvm.poll() is not None  # killed, not left running beside the new one
    assert healthy(fresh)
    assert fresh.range(4).count() == 4


BROKEN_TESTS = """
import pytest
from pyspark import SparkContext


def test_1_kills_its_jvm(spark):
    SparkContext._gateway.proc.kill()
    spark.range(3).count()


def test_2_gets_a_working_session(spark):
    assert spark.range(3).count() == 3


@pytest.mark.timeout(3)
def test_3_times_out_in_a_py4j_call(spark):
    spark.sparkContext._jvm.java.lang.Thread.sleep(20_000)


def test_4_gets_a_working_session(spark):
    assert spark.range(4).count() == 4


JVMS = []


def test_5_fails_with_a_working_session(spark):
    JVMS.append(SparkContext._gateway.proc.pid)
    assert spark.range(5).count() == 6


def test_6_keeps_the_working_session(spark):
    assert SparkContext._gateway.proc.pid == JVMS[0]
    assert spark.range(6).count() == 6
"""


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_broken_session_fails_one_test(tmp_path: Path) -> None:
    # tests/spark/conftest.py's fixtures and report hook, in a pytest of its own
    (tmp_path / "conftest.py").write_text(
        "from tests.spark.conftest import pytest_runtest_makereport, spark, spark_context\n"
    )
    (tmp_path / "test_broken.py").write_text(textwrap.dedent(BROKEN_TESTS))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("PYTEST_ADDOPTS", None)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v", "-rA", "test_broken.py"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=540,
    )
    outcomes = {
        line.split("::")[1].split()[0]: line.split()[1]
        for line in done.stdout.splitlines()
        if line.startswith("test_broken.py::")
    }
    assert outcomes == {
        "test_1_kills_its_jvm": "FAILED",
        "test_2_gets_a_working_session": "PASSED",
        "test_3_times_out_in_a_py4j_call": "FAILED",
        "test_4_gets_a_working_session": "PASSED",
        "test_5_fails_with_a_working_session": "FAILED",
        "test_6_keeps_the_working_session": "PASSED",
    }, done.stdout[-6000:] + done.stderr[-3000:]
    assert "Timeout (>3.0s) from pytest-timeout" in done.stdout
