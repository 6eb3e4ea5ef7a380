#!/usr/bin/env bash
# Every check: set up .venv if needed, then lint, format, types, the docs build and the whole
# test suite.
#   ./scripts/check.sh                 the full tier (what CI runs): the tests that start a
#                                      JVM and the others side by side, with the Spark tests
#                                      run a second time, on the lowest PySpark we claim
#                                      (scripts/pyspark-floor.sh), and the built wheel
#                                      installed and run outside the repository
#                                      (scripts/wheel-check.sh); those two not with ARGS
#   ./scripts/check.sh --fast          the fast tier: the same static checks and docs build,
#                                      then every test not marked slow, spark, reliability
#                                      or e2e, on every CPU (pytest-xdist)
#   ./scripts/check.sh [--fast] ARGS   ARGS go to pytest (paths, -k, -x, ...)
set -euo pipefail
cd "$(dirname "$0")/.."

FAST_TIER="not slow and not spark and not reliability and not e2e"
fast=false
if [ "${1:-}" = "--fast" ]; then
    fast=true
    shift
fi

source scripts/setup.sh
source scripts/node-clients.sh

echo "== ruff check";  .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy --strict goflux tests/typing examples"; .venv/bin/mypy goflux tests/typing examples
# (not --quiet: it hides the warnings that --strict fails on. NO_MKDOCS_2_WARNING silences
# mkdocs-material's banner about its end of life, which is no build warning.)
echo "== mkdocs build --strict"; NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
if "$fast"; then
    echo "== pytest -m \"$FAST_TIER\" -n auto"; .venv/bin/pytest -m "$FAST_TIER" -n auto "$@"
else
    pyspark="$(.venv/bin/python -c 'from importlib.metadata import version; print(version("pyspark"))')"
    if [ "$#" -gt 0 ]; then
        echo "== pytest with pyspark $pyspark (.venv)"
        status=0
        .venv/bin/pytest "$@" || status=$?
        echo "== pyspark floor: skipped (pytest arguments given; ./scripts/pyspark-floor.sh runs it)"
        echo "== wheel check: skipped (pytest arguments given; ./scripts/wheel-check.sh runs it)"
        exit "$status"
    fi
    # Four runs side by side, their output one after the other: the tests that start
    # a JVM (marked spark), the Spark tests again on the lowest PySpark we claim, the
    # wheel built, installed and run as a user would (about 100 s alone, most of it
    # the demo's JVM and pip), and every other test. Most of the suite waits on timers,
    # servers and child processes, so one after the other they would take more than 10
    # minutes on 2 cores. The JVM runs are niced, so that the other tests' timing keeps
    # the CPU when they all want it; by 5, not more: Spark gives a Python worker it
    # starts a fixed 10 s to connect back, and a worker niced by 10 gets a tenth of a
    # core behind full-priority load, where its start takes 1.4 s of CPU (at 10, a
    # Spark Connect query's foreachBatch worker missed it beside two CPU hogs; at 5 it
    # made it). A JVM test whose worker still misses it at start runs that start again
    # (tests/spark/helpers.py: starting_again, run_to_end).
    #
    # On a machine already busy when the check starts (a load average at or above its
    # CPUs: other work, CPU hogs), niced processes starve: Spark gives the Python worker
    # it starts a fixed 10 s to connect back, and a niced worker behind full-priority
    # load misses it. There the three JVM runs go one after another, not niced, beside
    # the other tests.
    PYTHON="$PYTHON" scripts/pyspark-floor.sh --install
    spark_log="$(mktemp)"
    floor_log="$(mktemp)"
    wheel_log="$(mktemp)"
    cpus="$(nproc)"
    load="$(cut -d' ' -f1 /proc/loadavg)"
    if awk -v load="$load" -v cpus="$cpus" 'BEGIN { exit !(load >= cpus) }'; then
        echo "== a busy machine (load $load on $cpus CPUs): the JVM runs one after another"
        (
            .venv/bin/pytest -m spark -p no:cacheprovider > "$spark_log" 2>&1
            echo "$?" > "$spark_log.status"
            scripts/pyspark-floor.sh > "$floor_log" 2>&1
            echo "$?" > "$floor_log.status"
            PYTHON="$PYTHON" scripts/wheel-check.sh > "$wheel_log" 2>&1
            echo "$?" > "$wheel_log.status"
        ) &
        spark_pid=$!
        floor_pid=$spark_pid
        wheel_pid=$spark_pid
    else
        nice -n 5 .venv/bin/pytest -m spark -p no:cacheprovider > "$spark_log" 2>&1 &
        spark_pid=$!
        nice -n 5 scripts/pyspark-floor.sh > "$floor_log" 2>&1 &
        floor_pid=$!
        PYTHON="$PYTHON" nice -n 5 scripts/wheel-check.sh > "$wheel_log" 2>&1 &
        wheel_pid=$!
    fi
    trap 'kill "$spark_pid" "$floor_pid" "$wheel_pid" 2>/dev/null || true
          rm -f "$spark_log"* "$floor_log"* "$wheel_log"*' EXIT
    echo "== pytest -m \"not spark\" with pyspark $pyspark (.venv)"
    status=0
    # (--durations: the slowest tests, where to look when the check grows past 10 minutes)
    .venv/bin/pytest -m "not spark" --durations=30 || status=$?
    spark_status=0
    floor_status=0
    wheel_status=0
    if [ "$floor_pid" = "$spark_pid" ]; then  # one after another: each wrote its status
        wait "$spark_pid" || true
        spark_status="$(cat "$spark_log.status" 2>/dev/null || echo 1)"
        floor_status="$(cat "$floor_log.status" 2>/dev/null || echo 1)"
        wheel_status="$(cat "$wheel_log.status" 2>/dev/null || echo 1)"
    else
        wait "$spark_pid" || spark_status=$?
        wait "$floor_pid" || floor_status=$?
        wait "$wheel_pid" || wheel_status=$?
    fi
    echo "== pytest -m spark with pyspark $pyspark (.venv)"
    cat "$spark_log"
    cat "$floor_log"
    echo "== scripts/wheel-check.sh"
    cat "$wheel_log"
    for run_status in "$spark_status" "$floor_status" "$wheel_status"; do
        if [ "$status" -eq 0 ]; then
            status=$run_status
        fi
    done
    exit "$status"
fi
