"""The main job: orders through a payment service and Spark, and back to JetStream.

1. A shop publishes typed ``Order`` events on ``orders.created``.
2. A payment service (a durable JetStream consumer wrapped in ``retry_ack``) charges
   them: a flaky gateway fails some orders twice (retried with broker-side backoff),
   orders with a non-positive amount are dead-lettered on ``deadletter.orders``.
3. A Spark Structured Streaming job reads the accepted orders through the goflux
   source, sums revenue per customer per minute, and publishes the results on
   ``revenue.by_customer`` through the ``foreachBatch`` sink.
4. A subscriber collects the results; the run checks them and the traces.

The code is in ``goflux/demo/`` (model.py, service.py, analytics.py, run.py), so the
``goflux demo`` command runs the same pipeline. With NATS_URL unset it starts an
embedded nats-server; Spark runs ``local[*]`` (``--master`` for a cluster) and needs
Java 17+.

Run: python examples/orders_pipeline.py [--orders 500] [--master local[*]]
"""

import sys

from goflux.cli import main

if __name__ == "__main__":
    sys.exit(main(["demo", *sys.argv[1:]]))
