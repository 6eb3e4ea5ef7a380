"""The open-file limit of a ``goflux run`` process: raised to the hard limit at start."""

from __future__ import annotations

import sys

__all__ = ("raise_open_files_limit",)

_CEILING = 1 << 20  # where the hard limit is unlimited: the kernel's usual nr_open


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise this process's soft limit of open files to its hard limit, as Go's runtime does.

    A service's HTTP server keeps each client's idle connection open for a while (see
    ``KEEP_ALIVE_SECONDS``): under the common soft limit of 1024 a thousand clients
    would stop it from accepting more. Processes this one starts inherit the limit.

    Returns:
        The soft limit before and after, or None where it was already the hard limit
        or cannot be changed (no such limit on this platform, a refusal).
    """
    if sys.platform == "win32":  # pragma: no cover - no RLIMIT_NOFILE
        return None
    import resource  # noqa: PLC0415 - POSIX only

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _CEILING if hard == resource.RLIM_INFINITY else hard
    if soft != resource.RLIM_INFINITY and soft >= wanted:
        return None
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))
    except (ValueError, OSError):  # e.g. above the kernel's nr_open: leave it
        return None
    return soft, wanted
