"""The supervisor's crash record: what a dead worker held is counted once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

from goflux.service._crashes import CrashBook, in_flight_path

REPLY = "$JS.ACK.ORDERS.work.1.7.7.1700000000000000000.0"


def test_a_restarted_worker_dying_before_it_made_its_own_file_is_not_blamed() -> None:
    book = CrashBook(quarantine_after=2)
    try:
        path = in_flight_path(book.directory, 1)
        script = textwrap.dedent(f"""
            import os, signal
            from goflux._compose.inflight import InFlight
            InFlight({path!r}).claim().hold({REPLY!r})
            os.kill(os.getpid(), signal.SIGKILL)
        """)
        process = subprocess.run([sys.executable, "-c", script], check=False, timeout=30)
        assert process.returncode == -signal.SIGKILL
        first = book.died(1, "worker 1 (pid 1) was killed by SIGKILL")
        assert first == [
            "message 7 of stream 'ORDERS' (consumer 'work') (crash 1: quarantined at 2)"
        ]
        # Its next process dies while starting, before it has a file of its own: the
        # message the first one held is not counted again.
        assert book.died(1, "worker 1 (pid 2) was killed by SIGKILL") == []
        assert not os.path.exists(path)
    finally:
        book.close()
