#!/usr/bin/env bash
# The main job: set up .venv if needed, then run the end-to-end pipeline (goflux demo):
# orders -> payment service (retries, dead letters) -> Spark -> revenue back on JetStream.
# Arguments go to `goflux demo` (e.g. --orders 2000, --master spark://host:7077).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

exec .venv/bin/goflux demo "$@"
