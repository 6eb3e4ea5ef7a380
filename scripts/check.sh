#!/usr/bin/env bash
# Every check: set up .venv if needed, then lint, format, types, the docs build and the whole
# test suite.
#   ./scripts/check.sh                 the full tier (what CI runs), with the Spark tests
#                                      run a second time, on the lowest PySpark we claim
#                                      (scripts/pyspark-floor.sh; not with ARGS)
#   ./scripts/check.sh --fast          the fast tier: the same static checks and docs build,
#                                      then every test not marked slow, spark, reliability
#                                      or e2e
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
    echo "== pytest -m \"$FAST_TIER\""; .venv/bin/pytest -m "$FAST_TIER" "$@"
else
    floor_log=""
    if [ "$#" -eq 0 ]; then
        # The Spark tests on the lowest PySpark run alongside the whole suite (its output
        # follows it): both mostly wait on timers, servers and JVMs, and one after the
        # other they would take more than 10 minutes on 2 cores. Niced, so that the
        # suite's timing tests keep the CPU when both want it.
        PYTHON="$PYTHON" scripts/pyspark-floor.sh --install
        floor_log="$(mktemp)"
        nice -n 10 scripts/pyspark-floor.sh > "$floor_log" 2>&1 &
        floor_pid=$!
        trap 'kill "$floor_pid" 2>/dev/null || true; rm -f "$floor_log"' EXIT
    fi
    pyspark="$(.venv/bin/python -c 'from importlib.metadata import version; print(version("pyspark"))')"
    echo "== pytest with pyspark $pyspark (.venv)"
    status=0
    .venv/bin/pytest "$@" || status=$?
    if [ -n "$floor_log" ]; then
        floor_status=0
        wait "$floor_pid" || floor_status=$?
        cat "$floor_log"
        if [ "$status" -eq 0 ]; then
            status=$floor_status
        fi
    else
        echo "== pyspark floor: skipped (pytest arguments given; ./scripts/pyspark-floor.sh runs it)"
    fi
    exit "$status"
fi
