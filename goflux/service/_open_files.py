"""The open-file limit of a ``goflux run`` process: raised to the hard limit at start."""

from __future__ import annotations

import sys

__all__ = ("raise_open_files_limit",)

_CEILING = 1 << 20  # where the hard limit is unlimited: the kernel's usual nr_open
# macOS reports an unlimited hard limit but refuses a soft one above
# kern.maxfilesperproc: then OPEN_MAX, what Go's runtime falls back to there too.
_OPEN_MAX = 10240


def raise_open_files_limit() -> tuple[int, int] | None:
    """Raise this process's soft limit of open files to its hard limit, as Go's runtime does.

    A service's HTTP server keeps each client's idle connection open for a while (see
    ``KEEP_ALIVE_SECONDS``): under the common soft limit of 1024 a thousand clients
    would stop it from accepting more. Processes this one starts inherit the raised
    limit (Go puts the original back for the processes it starts).

    Returns:
        The soft limit before and after, or None where it was already the hard limit
        or cannot be changed (no such limit on this platform, a refusal).
    """
    if sys.platform == "win32":  # pragma: no cover - no RLIMIT_NOFILE
        return None
    import resource  # noqa: PLC0415 - POSIX only

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = _CEILING if hard == resource.RLIM_INFINITY else hard
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return None
    for limit in (wanted, min(wanted, _OPEN_MAX)):
        if limit <= soft:
            break
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))
        except (ValueError, OSError):  # above what the kernel allows: try lower
            continue
        return soft, limit
    return None
