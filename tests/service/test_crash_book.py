"""The supervisor's crash record: what a dead worker held is counted once."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from goflux.service._crashes import CrashBook, in_flight_path, remove_abandoned

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


def _start(script: str, **env: str) -> tuple[subprocess.Popen[str], str]:
    """Run ``script`` in a process of its own; return it and the first line it prints."""
    process = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(script)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
    )
    assert process.stdout is not None
    return process, process.stdout.readline().strip()


def _kill(process: subprocess.Popen[str]) -> None:
    process.kill()
    process.communicate(timeout=30)  # (and its pipes are closed)
    assert process.returncode == -signal.SIGKILL


SUPERVISOR = """
    import sys
    from goflux.service._crashes import CrashBook
    book = CrashBook(2, parent={parent!r})
    print(book.directory, flush=True)
    sys.stdin.readline()
"""


def test_a_directory_left_by_a_killed_supervisor_is_removed_by_the_next(tmp_path: Path) -> None:
    supervisor, left = _start(SUPERVISOR.format(parent=str(tmp_path)))
    try:
        assert os.path.isdir(left)
        running = CrashBook(2, parent=str(tmp_path))  # a supervisor still running: kept
        assert os.path.isdir(left)
    finally:
        _kill(supervisor)  # outright: it cannot remove its directory
    try:
        assert os.path.isdir(left)
        newer = CrashBook(2, parent=str(tmp_path))
        assert not os.path.exists(left)
        assert os.path.isdir(running.directory)  # its supervisor (this process) runs
        newer.close()
    finally:
        running.close()
    assert os.listdir(tmp_path) == []


def test_a_directory_is_kept_while_a_worker_of_its_killed_supervisor_runs(
    tmp_path: Path,
) -> None:
    supervisor, directory = _start(SUPERVISOR.format(parent=str(tmp_path)))
    try:
        worker, ready = _start(
            """
            import sys
            from goflux.service._crashes import worker_guard
            print(worker_guard(1) is not None, flush=True)
            sys.stdin.readline()
            """,
            GOFLUX_CRASH_DIR=directory,
        )
    finally:
        _kill(supervisor)
    try:
        assert ready == "True"  # (its guard was made: it holds the directory)
        CrashBook(2, parent=str(tmp_path)).close()  # the worker still drains
        assert os.path.isdir(directory)
    finally:
        _kill(worker)
    CrashBook(2, parent=str(tmp_path)).close()
    assert os.listdir(tmp_path) == []


def test_what_is_not_a_supervisors_directory_is_left_alone(tmp_path: Path) -> None:
    unlocked = tmp_path / "goflux-run-older"  # made by another version, or being made
    unlocked.mkdir()
    (unlocked / "worker-1.inflight").write_bytes(b"")
    (tmp_path / "goflux-run-file").write_text("a file")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "supervisor.lock").write_text("")
    (tmp_path / "goflux-run-link").symlink_to(elsewhere)  # a link to a lockable directory
    linked_lock = tmp_path / "goflux-run-linked-lock"
    linked_lock.mkdir()
    (linked_lock / "supervisor.lock").symlink_to(elsewhere / "supervisor.lock")
    fifo = tmp_path / "goflux-run-fifo"  # (opening a FIFO would wait for a writer)
    fifo.mkdir()
    os.mkfifo(fifo / "supervisor.lock")
    making = tmp_path / "goflux-run-making"  # a supervisor making it: its lock not named
    making.mkdir()
    (making / "supervisor.lock.new").write_text("")
    before = sorted(os.listdir(tmp_path))
    CrashBook(2, parent=str(tmp_path)).close()
    assert sorted(os.listdir(tmp_path)) == before
    assert os.listdir(elsewhere) == ["supervisor.lock"]
    # A minute on, nobody holding its lock: its supervisor was killed making it.
    an_hour_ago = time.time() - 3600
    os.utime(making / "supervisor.lock.new", (an_hour_ago, an_hour_ago))
    CrashBook(2, parent=str(tmp_path)).close()
    assert sorted(os.listdir(tmp_path)) == sorted(set(before) - {"goflux-run-making"})


def test_closing_twice_does_nothing(tmp_path: Path) -> None:
    book = CrashBook(2, parent=str(tmp_path))
    book.close()
    unrelated = os.open(tmp_path / "unrelated", os.O_CREAT | os.O_WRONLY)  # (may reuse the fd)
    try:
        book.close()
        os.write(unrelated, b"still open")
    finally:
        os.close(unrelated)


def test_supervisors_sweeping_at_once_remove_each_directory_once_without_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Threads stand for processes here: each open of the lock file is a file of its
    # own, which flock locks apart.
    sweepers = 4
    removed: list[str] = []

    def sweep(start: threading.Barrier) -> None:
        start.wait()
        removed.extend(remove_abandoned(str(tmp_path)))

    for _ in range(25):
        books = [CrashBook(2, parent=str(tmp_path)) for _ in range(5)]
        for book in books:  # their supervisors killed: the locks let go
            assert book._lock is not None
            os.close(book._lock)
            book._lock = None
        start = threading.Barrier(sweepers)
        threads = [threading.Thread(target=sweep, args=(start,)) for _ in range(sweepers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(removed) == len(set(removed)) == 125
    assert os.listdir(tmp_path) == []
    assert [r.message for r in caplog.records if r.levelno >= logging.WARNING] == []
