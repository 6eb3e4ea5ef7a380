"""How Spark tasks reach NATS: picklable connection settings and a per-task event loop.

Readers and writers are pickled to executors, so they carry only these settings and
connect lazily, each task on a fresh event loop, without reconnecting: a broken
connection fails the task (Spark retries it) instead of hanging it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import ssl
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Required, TypeVar, cast
from urllib.parse import unquote, urlsplit, urlunsplit

import nats
from nats.aio.client import Client
from typing_extensions import TypedDict

from goflux._errors import TransportError
from goflux._urls import redact_url
from goflux.transports.spark._errors import SourceOptionError

__all__ = (
    "ConnectionOptions",
    "ConnectionSettings",
    "TaskLoop",
    "connection_options",
    "require_keywords",
)

_R = TypeVar("_R")
_log = logging.getLogger("goflux.transports.spark")

# Spark option name -> ConnectionOptions field.
_OPTION_FIELDS: Mapping[str, str] = {
    "servers": "servers",
    "user": "user",
    "password": "password",
    "token": "token",
    "credsfile": "creds_file",
    "nkeyseedfile": "nkey_seed_file",
    "tlscafile": "tls_ca_file",
    "tlscertfile": "tls_cert_file",
    "tlskeyfile": "tls_key_file",
    "connecttimeout": "connect_timeout",
}
_SPARK_NAMES: Mapping[str, str] = {
    "servers": "servers",
    "user": "user",
    "password": "password",
    "token": "token",
    "creds_file": "credsFile",
    "nkey_seed_file": "nkeySeedFile",
    "tls_ca_file": "tlsCaFile",
    "tls_cert_file": "tlsCertFile",
    "tls_key_file": "tlsKeyFile",
    "connect_timeout": "connectTimeout",
}


class ConnectionSettings(TypedDict, total=False):
    """How to reach NATS, as keyword arguments: :class:`ConnectionOptions`' fields.

    The source's and the sinks' functions take them beside their own options;
    ``servers`` is required.
    """

    servers: Required[str | list[str] | tuple[str, ...]]
    user: str | None
    password: str | None
    token: str | None
    creds_file: str | None
    nkey_seed_file: str | None
    tls_ca_file: str | None
    tls_cert_file: str | None
    tls_key_file: str | None
    connect_timeout: float


def require_keywords(caller: str, given: Mapping[str, Any], *names: str) -> None:
    """Fail as Python does when a required keyword argument of ``caller`` is missing.

    Raises:
        TypeError: The first of ``names`` not in ``given``.
    """
    for name in names:
        if name not in given:
            raise TypeError(f"{caller}() missing required keyword argument {name!r}")


def connection_options(caller: str, settings: Mapping[str, Any]) -> ConnectionOptions:
    """The :class:`ConnectionOptions` of ``settings`` (what a call left of its keywords).

    Raises:
        TypeError: ``servers`` is missing, or a keyword is unknown (``caller`` names
            the function called).
        SourceOptionError: A setting is malformed.
    """
    require_keywords(caller, settings, "servers")
    given = dict(settings)
    servers = given.pop("servers")
    unknown = sorted(set(given) - set(ConnectionSettings.__annotations__))
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword argument(s) {', '.join(unknown)}")
    return ConnectionOptions(
        servers=(servers,) if isinstance(servers, str) else tuple(servers), **given
    )


@dataclass(frozen=True)
class ConnectionOptions:
    """Where and how to connect to NATS; secrets are left out of ``repr``.

    Attributes:
        servers: Server URLs (``nats://host:4222``, ``tls://...``).
        user: User name (with ``password``).
        password: Password for ``user``.
        token: Authentication token.
        creds_file: Path of a ``.creds`` file (JWT and nkey seed).
        nkey_seed_file: Path of an nkey seed file.
        tls_ca_file: CA bundle to verify the server with.
        tls_cert_file: Client certificate (with ``tls_key_file``).
        tls_key_file: Client private key.
        connect_timeout: Seconds to wait for the connection.
    """

    servers: tuple[str, ...]
    user: str | None = None
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)
    creds_file: str | None = None
    nkey_seed_file: str | None = None
    tls_ca_file: str | None = None
    tls_cert_file: str | None = None
    tls_key_file: str | None = None
    connect_timeout: float = 5.0

    def __post_init__(self) -> None:
        servers: object = self.servers
        if isinstance(servers, str):  # a single URL (or a comma-separated list)
            object.__setattr__(self, "servers", _split_servers(servers))
        self._lift_credentials()
        if not self.servers:
            raise SourceOptionError("servers is required: the NATS server URL(s)")
        if (self.user is None) != (self.password is None):
            raise SourceOptionError("user and password go together")
        if self.tls_key_file is not None and self.tls_cert_file is None:
            raise SourceOptionError("tls_key_file needs tls_cert_file")
        if not (self.connect_timeout > 0 and math.isfinite(self.connect_timeout)):
            raise SourceOptionError(f"connect_timeout must be > 0, got {self.connect_timeout}")

    def _lift_credentials(self) -> None:
        """Move ``user:password@`` / ``token@`` out of the URLs into their fields.

        Spark shows options in query plans and logs, redacting only options named
        like secrets (``password``, ``token``); a URL would carry them in the clear.
        """
        bare: list[str] = []
        for url in self.servers:
            parts = urlsplit(url if "://" in url else f"nats://{url}")
            try:
                parts.port  # noqa: B018 - parsing it is the check
            except ValueError:
                malformed = True
            else:  # credentials urlsplit could not find (a bare '/', '#' or '?' in them)
                malformed = parts.username is None and "@" in url
            if malformed:
                # The URL is not echoed: it may hold a password cut at a ',' or '/'.
                raise SourceOptionError(
                    "a server URL has a malformed host, port or credentials; "
                    "percent-encode ',', '/', '#', '?' and '@' in a user name or "
                    "password, or pass them as the user/password options"
                )
            if parts.username is None:
                bare.append(url)
                continue
            user, password = unquote(parts.username), parts.password
            if password is None:
                self._set_once("token", user)
            else:
                self._set_once("user", user)
                self._set_once("password", unquote(password))
            host = parts.netloc.rsplit("@", 1)[1]
            bare.append(urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)))
        object.__setattr__(self, "servers", tuple(bare))

    def _set_once(self, name: str, value: str) -> None:
        current = getattr(self, name)
        if current is not None and current != value:
            raise SourceOptionError(
                f"the server URLs and the {name} option give different credentials"
            )
        object.__setattr__(self, name, value)

    @classmethod
    def from_options(cls, options: Mapping[str, str]) -> ConnectionOptions:
        """Read the settings from Spark options (keys compared case-insensitively).

        Raises:
            SourceOptionError: ``servers`` is missing or a value is malformed.
        """
        lowered = {key.lower(): value for key, value in options.items()}
        values: dict[str, Any] = {}
        for option, name in _OPTION_FIELDS.items():
            if option in lowered and lowered[option] != "":
                values[name] = lowered[option]
        if "servers" not in values:
            raise SourceOptionError("option 'servers' is required: the NATS server URL(s)")
        values["servers"] = _split_servers(values["servers"])
        if "connect_timeout" in values:
            try:
                values["connect_timeout"] = float(values["connect_timeout"])
            except ValueError as exc:
                raise SourceOptionError(
                    f"option 'connectTimeout' must be a number of seconds, "
                    f"got {values['connect_timeout']!r}"
                ) from exc
        return cls(**values)

    def to_options(self) -> dict[str, str]:
        """The settings as Spark options (the inverse of :meth:`from_options`)."""
        out = {"servers": ",".join(self.servers)}
        for name, option in _SPARK_NAMES.items():
            value = getattr(self, name)
            if name != "servers" and value is not None:
                out[option] = str(value)
        return out

    def _tls(self) -> ssl.SSLContext | None:
        if self.tls_ca_file is None and self.tls_cert_file is None:
            return None
        context = ssl.create_default_context(cafile=self.tls_ca_file)
        if self.tls_cert_file is not None:
            context.load_cert_chain(self.tls_cert_file, self.tls_key_file)
        return context

    async def connect(self, *, client: type[Client] = Client, name: str = "goflux-spark") -> Client:
        """Open a connection that does not reconnect (a broken one fails the task).

        Raises:
            TransportError: The servers cannot be reached or refuse the credentials.
        """
        nc = client()
        try:
            await nc.connect(
                servers=list(self.servers),
                name=name,
                user=self.user,
                password=self.password,
                token=self.token,
                user_credentials=self.creds_file,
                nkeys_seed=self.nkey_seed_file,
                tls=self._tls(),
                connect_timeout=cast(int, self.connect_timeout),  # nats-py takes floats
                allow_reconnect=False,
                max_reconnect_attempts=1,  # 0 makes nats-py retry the initial connect forever
                error_cb=_report_quietly,
            )
        except (OSError, TimeoutError, nats.errors.Error) as exc:
            # nats-py leaves the socket of a refused connection (bad credentials) open;
            # closing after a failed TLS handshake can hang, hence the bound.
            with contextlib.suppress(Exception):
                await asyncio.wait_for(nc.close(), timeout=1.0)
            raise TransportError(
                f"cannot connect to NATS at {', '.join(map(redact_url, self.servers))}: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        return nc


async def _report_quietly(exc: Exception) -> None:
    """nats-py logs every error with a traceback; failures reach the task as exceptions."""
    _log.debug("NATS connection error: %s: %s", type(exc).__name__, exc)


def _split_servers(value: str) -> tuple[str, ...]:
    return tuple(part.strip() for part in value.split(",") if part.strip())


class TaskLoop:
    """A private event loop for synchronous Spark code (a task, the driver's planner).

    Spark calls readers and writers synchronously, and a generator cannot live inside
    ``asyncio.run``; this loop is driven with ``run_until_complete`` between yields
    and closed when the work is done.
    """

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()

    def run(self, work: Awaitable[_R]) -> _R:
        """Run ``work`` to completion on this loop and return its result."""
        return self._loop.run_until_complete(work)

    def close(self) -> None:
        """Cancel what is left on the loop and close it."""
        if self._loop.is_closed():
            return
        pending = [task for task in asyncio.all_tasks(self._loop) if not task.done()]
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.run_until_complete(self._loop.shutdown_asyncgens())
        self._loop.close()
