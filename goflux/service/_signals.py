"""SIGTERM and SIGINT in a ``goflux run`` process, supervisor or worker."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Iterator

__all__ = ("STOP_SIGNALS", "stop_signals")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@contextlib.contextmanager
def stop_signals(on_signal: Callable[[signal.Signals], None]) -> Iterator[None]:
    """Call ``on_signal(sig)`` in the running loop for SIGTERM and SIGINT while inside.

    On leaving, the signals are ignored rather than restored: the process is about to
    exit, and a late copy of a signal (sent to every process at once, or forwarded by
    the supervisor as well) must not kill it on the way out.
    """
    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        yield
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)
            signal.signal(sig, signal.SIG_IGN)
