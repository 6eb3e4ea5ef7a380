"""Publishers made before and after the global meter provider is set, in a fresh process.

Usage: python -m tests.transports.global_meter_job URL

The OpenTelemetry API lets a process set its global meter provider once, so a test
runs this in its own interpreter. One publisher uses ``Telemetry.default()`` on the
placeholder provider, made before the provider is set; then one with ``Telemetry()``
and one with ``Telemetry(meter_provider=provider)``, made after. Each publishes 3
messages to its own subject; the job prints what the provider's reader saw, as JSON.
"""

from __future__ import annotations

import asyncio
import json
import sys

import nats
from opentelemetry import metrics
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader, Sum

from goflux import StrCodec, Telemetry
from goflux.transports import jetstream


async def main(url: str) -> None:
    nc = await nats.connect(url)
    js = nc.jetstream()
    await jetstream.ensure_stream(js, name="GLOBAL", subjects=["global.>"])
    early = jetstream.Publisher(js, StrCodec())  # Telemetry.default(): the placeholder
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    metrics.set_meter_provider(provider)
    late = jetstream.Publisher(js, StrCodec(), telemetry=Telemetry())
    explicit = jetstream.Publisher(js, StrCodec(), telemetry=Telemetry(meter_provider=provider))
    for _ in range(3):
        await early.publish("global.early", "x")
        await late.publish("global.late", "x")
        await explicit.publish("global.explicit", "x")
    await nc.close()
    sent: dict[str, int] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == "messaging.client.sent.messages":
                    assert isinstance(metric.data, Sum)
                    for point in metric.data.data_points:
                        subject = str((point.attributes or {})["messaging.destination.name"])
                        sent[subject] = sent.get(subject, 0) + int(point.value)
    print(json.dumps(sent, sort_keys=True))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
