"""The ``goflux`` command: a development server, the demo, services, and stream inspection.

::

    goflux run MODULE:ATTR [--workers N] [--health-port P] [--reload] ...   run a service
    goflux asyncapi MODULE:ATTR [--format yaml] [--out F] [--serve]   its AsyncAPI document
    goflux server [--port 4222] [--store DIR]   run a JetStream server in the foreground
    goflux demo [--orders 500] [--master local[*] | --remote sc://H:P]   the end-to-end pipeline
    goflux streams [--url URL]                  streams with message counts
    goflux consumers [--url URL] [STREAM]       consumers with their lag
    goflux kv ls|get|put|watch BUCKET [KEY]     Key-Value buckets (see goflux.cli._kv)
    goflux obj ls|put|get BUCKET [NAME]         Object store buckets (see goflux.cli._obj)
    goflux services [--server URL] [NAME]       NATS micro services (see goflux.cli._services)
    goflux --version                            the versions of goflux and its libraries

The console script and ``python -m goflux`` call :func:`main`.
"""

from goflux._exports import publish_names as _publish_names
from goflux.cli._main import main

__all__ = ("main",)

_publish_names(__name__, globals())
