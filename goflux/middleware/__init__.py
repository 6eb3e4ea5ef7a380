"""Handler and publisher middleware (ack policies, retries, dead letters, timeouts).

Compose middleware with :func:`goflux.chain`; the first given is the outermost.
"""

__all__ = ()
