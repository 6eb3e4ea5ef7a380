#!/usr/bin/env bash
# Every check: set up .venv if needed, then lint, format, types, the docs build and the whole
# test suite.
#   ./scripts/check.sh                 the full tier (what CI runs)
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

echo "== ruff check";  .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy --strict goflux tests/typing examples"; .venv/bin/mypy goflux tests/typing examples
# (not --quiet: it hides the warnings that --strict fails on. NO_MKDOCS_2_WARNING silences
# mkdocs-material's banner about its end of life, which is no build warning.)
echo "== mkdocs build --strict"; NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
if "$fast"; then
    echo "== pytest -m \"$FAST_TIER\""; .venv/bin/pytest -m "$FAST_TIER" "$@"
else
    echo "== pytest";      .venv/bin/pytest "$@"
fi
