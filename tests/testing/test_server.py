"""goflux.testing.NatsServer against the real nats-server binary."""

from __future__ import annotations

import asyncio
import errno
import fcntl
import gc
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
from pathlib import Path

import nats
import pytest

from goflux.testing import (
    NatsServer,
    NatsServerError,
    NatsServerNotFound,
    _abandoned,
    find_nats_server,
)
from goflux.testing._abandoned import LOCK_FILE


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); look at its state.
    status = Path(f"/proc/{pid}/status")
    return not status.exists() or "zombie" not in status.read_text()


async def stream_count(url: str, stream: str) -> int:
    nc = await nats.connect(url, allow_reconnect=False)
    try:
        info = await nc.jetstream().stream_info(stream)
        return info.state.messages
    finally:
        await nc.close()


async def test_starts_fast_on_a_free_loopback_port_and_accepts_clients() -> None:
    async with NatsServer() as server:
        assert server.running
        assert server.url.startswith("nats://127.0.0.1:")
        assert server.port > 0
        # Measured ~15 ms; the bound only guards against a fixed sleep creeping in.
        assert server.startup_seconds is not None
        assert server.startup_seconds < 1.0
        nc = await nats.connect(server.url, allow_reconnect=False)
        assert nc.is_connected
        assert nc.connected_server_version.major >= 2
        await nc.close()


async def test_restart_after_kill_keeps_port_and_jetstream_data() -> None:
    async with NatsServer() as server:
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="KEEP", subjects=["keep.>"])
        for n in range(5):
            await js.publish("keep.x", str(n).encode())
        await nc.close()
        port, pid = server.port, server.pid
        assert pid is not None

        server.kill()
        assert not server.running
        assert not alive(pid)
        with pytest.raises(ConnectionRefusedError):
            await asyncio.open_connection(server.host, port)

        await server.restart()
        assert server.port == port
        assert server.pid != pid
        assert await stream_count(server.url, "KEEP") == 5


async def test_restart_of_a_running_server_is_graceful_and_keeps_data() -> None:
    async with NatsServer() as server:
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="GRACE", subjects=["grace"])
        await js.publish("grace", b"x")
        await nc.close()
        await server.restart()
        assert await stream_count(server.url, "GRACE") == 1


async def test_stop_keeping_the_store_allows_an_outage_then_a_restart() -> None:
    async with NatsServer() as server:
        nc = await nats.connect(server.url, allow_reconnect=False)
        js = nc.jetstream()
        await js.add_stream(name="OUTAGE", subjects=["outage"])
        await js.publish("outage", b"x")
        await nc.close()
        pid = server.pid
        assert pid is not None
        server.stop(keep_store=True)
        assert not server.running
        assert not alive(pid)
        await server.restart()
        assert await stream_count(server.url, "OUTAGE") == 1


def test_stop_removes_the_process_and_the_temporary_store() -> None:
    with NatsServer() as server:
        pid = server.pid
        store = server.store_dir
        assert pid is not None
        assert store is not None
        assert Path(store).is_dir()
    assert not alive(pid)
    assert not Path(store).exists()
    assert not server.running
    assert server.pid is None


def test_an_abandoned_server_is_cleaned_up_when_collected() -> None:
    server = NatsServer().start()
    pid, store = server.pid, server.store_dir
    assert pid is not None
    assert store is not None
    del server
    gc.collect()
    assert not alive(pid)
    assert not Path(store).exists()


def test_a_caller_supplied_store_is_kept(tmp_path: Path) -> None:
    with NatsServer(store_dir=tmp_path / "js") as server:
        assert server.store_dir == str(tmp_path / "js")
    assert (tmp_path / "js" / "jetstream").is_dir()


def test_without_jetstream() -> None:
    with NatsServer(jetstream=False) as server:
        assert server.store_dir is None
        assert server.running


def test_a_taken_port_fails_with_the_server_log() -> None:
    with NatsServer(jetstream=False) as first:
        clash = NatsServer(jetstream=False, port=first.port)
        with pytest.raises(NatsServerError, match="exited during startup") as info:
            clash.start()
        assert "address already in use" in str(info.value)
        assert not clash.running


def test_double_start_and_early_facts_are_errors() -> None:
    server = NatsServer(jetstream=False)
    with pytest.raises(NatsServerError, match="not been started"):
        _ = server.url
    with server:
        with pytest.raises(NatsServerError, match="already running"):
            server.start()
        assert "Server is ready" in server.log_tail(50)
        assert "running on" in repr(server)


async def test_reload_returns_once_the_server_reloaded_its_configuration_file(
    tmp_path: Path,
) -> None:
    config = tmp_path / "server.conf"
    config.write_text("max_payload: 1000000\n")
    async with NatsServer(jetstream=False, args=["--config", str(config)]) as server:
        config.write_text("max_payload: 2000000\n")
        await server.reload()
        assert "Reloaded server configuration" in server.log_tail(5)
        nc = await nats.connect(server.url, allow_reconnect=False)
        assert nc.max_payload == 2_000_000  # what the server tells a new client
        await nc.close()
        config.write_text("max_payload: {\n")  # the server refuses it with its reason
        with pytest.raises(NatsServerError, match="did not reload its configuration: Failed"):
            await server.reload()
        assert server.running


async def test_reload_needs_a_configuration_file_and_a_running_server() -> None:
    server = NatsServer(jetstream=False)
    with pytest.raises(NatsServerError, match="needs a running server"):
        await server.reload()
    async with server:
        with pytest.raises(NatsServerError, match="only reload config when a file is provided"):
            await server.reload()


async def test_restart_needs_a_prior_start() -> None:
    with pytest.raises(NatsServerError, match="started before"):
        await NatsServer().restart()


def test_missing_binary_errors_say_how_to_fix_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    with pytest.raises(NatsServerNotFound, match="binary argument"):
        NatsServer(binary=tmp_path / "nope")
    monkeypatch.setenv("NATS_SERVER_BIN", str(tmp_path / "missing"))
    with pytest.raises(NatsServerNotFound, match=r"\$NATS_SERVER_BIN"):
        find_nats_server()
    monkeypatch.delenv("NATS_SERVER_BIN")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sysconfig, "get_path", lambda name: str(tmp_path))
    with pytest.raises(NatsServerNotFound, match=r"pip install 'goflux\[server\]'") as info:
        find_nats_server()
    assert isinstance(info.value, FileNotFoundError)


def test_nats_server_bin_is_found_by_default() -> None:
    path = find_nats_server()
    assert os.access(path, os.X_OK)


async def test_pytest_fixture(nats_server: NatsServer, nats_url: str) -> None:
    assert nats_server.running
    assert nats_url == nats_server.url
    nc = await nats.connect(nats_url, allow_reconnect=False)
    await nc.flush()
    await nc.close()


async def test_a_cancelled_start_leaves_no_server_behind() -> None:
    server = NatsServer()
    starting = asyncio.create_task(server.__aenter__())
    await asyncio.sleep(0)  # the process is spawned in this first step
    process = server._resources.process
    assert process is not None
    starting.cancel()
    with pytest.raises(asyncio.CancelledError):
        await starting
    assert not server.running
    assert not alive(process.popen.pid)
    server.stop()


def test_restart_after_stop_is_refused_because_the_store_is_gone() -> None:
    server = NatsServer()
    with server:
        pass
    with pytest.raises(NatsServerError, match="temporary store deleted"):
        asyncio.run(server.restart())


@pytest.mark.slow  # a child process
def test_a_crashed_owner_s_server_and_store_are_cleaned_up_by_the_next_one() -> None:
    code = (
        "import time; from goflux.testing import NatsServer; s = NatsServer().start(); "
        "print(s.pid, s.store_dir, flush=True); time.sleep(120)"
    )
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as owner:
        assert owner.stdout is not None
        pid_text, store = owner.stdout.readline().split()
        owner.kill()  # SIGKILL: no cleanup ran
        owner.wait()
    orphan = int(pid_text)
    assert alive(orphan)
    assert Path(store).is_dir()
    (Path(store) / "written-after-the-owner-died").write_text("")  # the store stays young

    NatsServer(jetstream=False)  # any new server sweeps what dead owners left

    assert not alive(orphan)
    assert not Path(store).exists()


def test_a_claimed_directory_is_swept_only_once_its_owner_lets_go() -> None:
    # The lock file appears already locked, and nothing else of the claim is left
    # behind; let go of, it is swept at once, however young.
    directory = Path(tempfile.mkdtemp(prefix="goflux-sweep-test-"))
    try:
        fd = _abandoned.claim(directory)
        assert fd is not None
        assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE]
        assert not lockable(directory / LOCK_FILE)
        _abandoned.sweep("goflux-sweep-test-", b"no-such-program")
        assert directory.is_dir()

        os.close(fd)
        _abandoned.sweep("goflux-sweep-test-", b"no-such-program")
        assert not directory.exists()
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_a_directory_being_claimed_is_never_swept() -> None:
    # Another process claims fresh directories as fast as it can while this one
    # sweeps: a lock file seen between being made and being locked would be taken
    # for an abandoned one, and its directory removed under its owner.
    claims = 500
    code = (
        "import sys, tempfile\n"
        "from goflux.testing import _abandoned\n"
        "fds = []\n"
        f"for _ in range({claims}):\n"
        "    d = tempfile.mkdtemp(prefix='goflux-claim-race-')\n"
        "    fds.append(_abandoned.claim(d))\n"
        "    print(d, flush=True)\n"
        "sys.stdin.read()  # holds every claim until told to go\n"
    )
    stop = threading.Event()

    def sweeping() -> None:
        while not stop.is_set():
            _abandoned.sweep("goflux-claim-race-", b"no-such-program")

    sweeper = threading.Thread(target=sweeping, daemon=True)
    with subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as owner:
        assert owner.stdin is not None
        assert owner.stdout is not None
        sweeper.start()
        try:
            claimed = [owner.stdout.readline().strip() for _ in range(claims)]
            stop.set()
            sweeper.join(timeout=30)
            swept = [d for d in claimed if not Path(d).is_dir()]
            assert (claimed.count(""), swept) == (0, [])
        finally:
            stop.set()
            owner.stdin.close()
            owner.wait(timeout=30)
            for directory in Path(tempfile.gettempdir()).glob("goflux-claim-race-*"):
                shutil.rmtree(directory, ignore_errors=True)


@pytest.mark.parametrize("hard_links", [True, False], ids=["linked", "renamed"])
def test_a_sweep_while_the_lock_file_is_made_leaves_the_directory(
    monkeypatch: pytest.MonkeyPatch, hard_links: bool
) -> None:
    # Another process's sweep comes at the claim's every lock taken (the owner
    # descheduled between making a file and locking it): it must never see an
    # unlocked lock file then, where the file system has hard links or not.
    directory = Path(tempfile.mkdtemp(prefix="goflux-sweep-test-"))
    flock = fcntl.flock
    swept_meanwhile: list[bool] = []

    def sweep_first(fd: int, operation: int) -> None:
        if not operation & fcntl.LOCK_NB:  # the claim's (the sweep's own do not wait)
            _abandoned.sweep("goflux-sweep-test-", b"no-such-program")
            swept_meanwhile.append(not directory.exists())
        flock(fd, operation)

    def no_hard_links(source: object, target: object) -> None:
        raise PermissionError(errno.EPERM, "hard links refused here", str(target))

    monkeypatch.setattr(_abandoned.fcntl, "flock", sweep_first)
    if not hard_links:
        monkeypatch.setattr(_abandoned.os, "link", no_hard_links)
    try:
        fd = _abandoned.claim(directory)
        monkeypatch.undo()
        assert fd is not None
        assert swept_meanwhile == [False]
        assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE]
        assert not lockable(directory / LOCK_FILE)
        os.close(fd)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def test_an_owner_that_died_making_its_lock_file_leaves_nothing_for_long() -> None:
    # Killed before its lock file appeared, an owner leaves only its staging file,
    # which names its pid: swept once that process is gone, spared while it lives.
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        check=True,
        capture_output=True,
        text=True,
    )
    dead_pid = int(dead.stdout)
    directories = {
        pid: Path(tempfile.mkdtemp(prefix="goflux-sweep-test-")) for pid in (dead_pid, os.getpid())
    }
    try:
        for pid, directory in directories.items():
            (directory / f"{LOCK_FILE}.{pid}.123").write_text("")
        _abandoned.sweep("goflux-sweep-test-", b"no-such-program")
        assert not directories[dead_pid].exists()
        assert directories[os.getpid()].is_dir()
    finally:
        for directory in directories.values():
            shutil.rmtree(directory, ignore_errors=True)


def test_a_directory_is_claimed_once() -> None:
    directory = Path(tempfile.mkdtemp(prefix="goflux-sweep-test-"))
    try:
        fd = _abandoned.claim(directory)
        assert fd is not None
        with pytest.raises(FileExistsError, match="claimed already"):
            _abandoned.claim(directory)
        assert sorted(p.name for p in directory.iterdir()) == [LOCK_FILE]
        assert not lockable(directory / LOCK_FILE)
        os.close(fd)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


def lockable(lock_file: Path) -> bool:
    """Whether nobody holds ``lock_file``'s flock (taken for the look, then let go)."""
    fd = os.open(lock_file, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False
    finally:
        os.close(fd)


@pytest.mark.slow  # a child process
def test_the_sweep_never_touches_a_live_owner_s_store() -> None:
    with NatsServer() as server:
        store = server.store_dir
        assert store is not None
        code = "from goflux.testing import NatsServer; NatsServer(jetstream=False)"
        subprocess.run([sys.executable, "-c", code], check=True, timeout=30)
        assert Path(store).is_dir()
        assert server.running
