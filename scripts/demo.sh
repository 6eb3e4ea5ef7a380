#!/usr/bin/env bash
# The main job: set up .venv if needed, then run the end-to-end examples.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/setup.sh

echo "== typed publish/subscribe on the in-process channel bus"
.venv/bin/python examples/channel_orders.py
echo
echo "== a real nats-server (embedded unless NATS_URL is set)"
.venv/bin/python examples/embedded_server.py
echo
echo "== durable, typed orders on JetStream (retries, de-duplication, poison messages)"
.venv/bin/python examples/jetstream_orders.py
echo
echo "== retry policy, dead letters and timeouts (middleware on JetStream)"
.venv/bin/python examples/retry_dead_letter.py
echo
echo "== composition: a fan-out pipe, bounded concurrency, micro-batches, a service group"
.venv/bin/python examples/composition.py
