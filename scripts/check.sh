#!/usr/bin/env bash
# Every check: set up .venv if needed, then lint, format, types and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== ruff check";  .venv/bin/ruff check .
echo "== ruff format"; .venv/bin/ruff format --check .
echo "== mypy --strict goflux tests/typing examples"; .venv/bin/mypy goflux tests/typing examples
echo "== pytest";      .venv/bin/pytest "$@"
