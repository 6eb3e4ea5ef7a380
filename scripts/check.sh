#!/usr/bin/env bash
# Every check: set up .venv if needed, then lint, format, types, the docs build and the whole
# test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== ruff check";  .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy --strict goflux tests/typing examples"; .venv/bin/mypy goflux tests/typing examples
# (not --quiet: it hides the warnings that --strict fails on. NO_MKDOCS_2_WARNING silences
# mkdocs-material's banner about its end of life, which is no build warning.)
echo "== mkdocs build --strict"; NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict
echo "== pytest";      .venv/bin/pytest "$@"
