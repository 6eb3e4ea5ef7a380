"""A worker's in-flight slots outlive it; the crash record is replaced whole and read lazily."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from goflux._compose.crashes import CrashEntry, CrashRecord, write_crash_record
from goflux._compose.inflight import SLOTS, InFlight, read_in_flight

REPLY = "$JS.ACK.ORDERS.payments.{delivered}.{sequence}.{sequence}.1712345678901234567.0"


def test_what_a_killed_process_was_holding_is_read_after_its_death(tmp_path: Path) -> None:
    path = tmp_path / "worker-1.inflight"
    script = textwrap.dedent(f"""
        import os, signal
        from goflux._compose.inflight import InFlight
        slots = InFlight({str(path)!r})
        done, running, again = slots.claim(), slots.claim(), slots.claim()
        done.hold("finished"); done.clear()
        running.hold({REPLY.format(delivered=1, sequence=7)!r})
        again.free(); slots.claim().hold("reused")  # a freed slot is handed out again
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    process = subprocess.run([sys.executable, "-c", script], check=False, timeout=30)
    assert process.returncode == -signal.SIGKILL
    assert read_in_flight(str(path)) == [REPLY.format(delivered=1, sequence=7), "reused"]


def test_a_new_process_starts_with_empty_slots_and_a_shorter_text_replaces_a_longer(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "worker-1.inflight")
    first = InFlight(path)
    slot = first.claim()
    slot.hold("a rather longer text than the next")
    slot.hold("short")
    assert read_in_flight(path) == ["short"]
    assert first.busy() == 1
    first.close()
    second = InFlight(path)  # the restarted worker
    assert read_in_flight(path) == []
    assert second.busy() == 0
    second.close()


def test_a_text_longer_than_a_slot_and_handlers_beyond_the_slots_are_not_recorded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "worker-1.inflight")
    slots = InFlight(path)
    claimed = [slots.claim() for _ in range(SLOTS)]
    claimed[0].hold("x" * 511)
    claimed[1].hold("x" * 510)
    extra = slots.claim()
    assert extra.index is None
    extra.hold("not recorded")
    extra.free()
    assert read_in_flight(path) == ["x" * 510]
    assert caplog.text.count(f"more than {SLOTS} handlers run at once") == 1
    slots.claim()  # still full: warned once
    assert caplog.text.count("handlers run at once") == 1
    slots.close()


def test_read_in_flight_of_a_missing_or_foreign_file_holds_nothing(tmp_path: Path) -> None:
    assert read_in_flight(str(tmp_path / "missing")) == []
    foreign = tmp_path / "foreign"
    foreign.write_bytes(b"\x01" * 4096)
    assert read_in_flight(str(foreign)) == []


def test_the_crash_record_is_read_again_only_when_replaced(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = str(tmp_path / "crashes.json")
    record = CrashRecord(path)
    assert record.lookup("ORDERS payments 7") is None  # no file yet: nothing crashed
    entry = CrashEntry(1, "worker 1 (pid 42) was killed by SIGKILL")
    write_crash_record(path, 2, {"ORDERS payments 7": entry})
    assert record.lookup("ORDERS payments 7") == entry
    assert record.quarantine_after == 2
    assert record.lookup("ORDERS payments 8") is None
    write_crash_record(path, 2, {"ORDERS payments 7": CrashEntry(2, "worker 2 (pid 43) ...")})
    assert record.lookup("ORDERS payments 7") == CrashEntry(2, "worker 2 (pid 43) ...")
    assert os.listdir(tmp_path) == ["crashes.json"]  # the new file was renamed over
    Path(path).write_text('{"messages": 3}')
    assert record.lookup("ORDERS payments 7") is None
    assert "the crash record" in caplog.text
    assert "cannot be read" in caplog.text
