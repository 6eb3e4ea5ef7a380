"""AsyncAPI servers from the nats-py connections a service uses, credentials left out."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ("Servers", "security_schemes")

_SCHEMES: dict[str, dict[str, str]] = {
    "userPassword": {
        "type": "userPassword",
        "description": "NATS user and password (not shown here).",
    },
    "token": {
        "type": "apiKey",
        "in": "password",
        "description": "A NATS authentication token (not shown here).",
    },
    "nkey": {
        "type": "asymmetricEncryption",
        "description": "An NKey or a JWT with its NKey seed (credentials file; not shown here).",
    },
}


def security_schemes(names: set[str]) -> dict[str, dict[str, str]]:
    """The security schemes ``names`` refers to, in a fixed order."""
    return {name: scheme for name, scheme in _SCHEMES.items() if name in names}


def _credentials(client: Any, urls: list[Any]) -> list[str]:
    """Which kinds of credentials a client presents (names of :data:`_SCHEMES`)."""
    options = getattr(client, "options", None) or {}
    kinds: list[str] = []
    if options.get("user") or any(url.username and url.password for url in urls):
        kinds.append("userPassword")
    # nats://TOKEN@host: a user name without a password is a token
    if options.get("token") or any(url.username and not url.password for url in urls):
        kinds.append("token")
    nkey = ("_user_credentials", "_nkeys_seed", "_nkeys_seed_str", "_user_jwt_cb")
    if any(getattr(client, name, None) for name in nkey):
        kinds.append("nkey")
    return kinds


_DEFAULT_PORTS = {"nats": 4222, "tls": 4222, "ws": 80, "wss": 443}


@dataclass
class _Server:
    host: str
    protocol: str
    secure: bool
    credentials: list[str]


class Servers:
    """The servers of every connection seen, named ``nats`` (one) or ``nats-1``, ``nats-2``..."""

    def __init__(self) -> None:
        self._servers: dict[str, _Server] = {}  # by host, in the order first seen
        self._by_client: dict[int, list[str]] = {}

    def add(self, client: Any) -> list[str]:
        """Take the servers ``client`` was given (not those it discovered); their hosts."""
        if client is None:
            return []
        known = self._by_client.get(id(client))
        if known is not None:
            return known
        urls = list(getattr(client, "servers", None) or ())
        discovered = list(getattr(client, "discovered_servers", None) or ())
        given = [url for url in urls if url not in discovered] or urls
        credentials = _credentials(client, given)
        hosts: list[str] = []
        for url in given:
            name = f"[{url.hostname}]" if ":" in (url.hostname or "") else url.hostname
            port = url.port or _DEFAULT_PORTS.get(url.scheme, 4222)
            host = f"{name}:{port}"
            secure = url.scheme in ("tls", "wss") or bool((client.options or {}).get("tls"))
            protocol = "ws" if url.scheme in ("ws", "wss") else "nats"
            server = self._servers.setdefault(host, _Server(host, protocol, secure, []))
            server.secure = server.secure or secure
            server.credentials.extend(c for c in credentials if c not in server.credentials)
            hosts.append(host)
        self._by_client[id(client)] = hosts
        return hosts

    def key(self, host: str) -> str:
        """The name of the server at ``host`` in the document."""
        hosts = list(self._servers)
        return "nats" if len(hosts) == 1 else f"nats-{hosts.index(host) + 1}"

    def document(self) -> tuple[dict[str, Any], set[str]]:
        """The ``servers`` object, and the security schemes it refers to."""
        servers: dict[str, Any] = {}
        used: set[str] = set()
        for host, server in self._servers.items():
            entry: dict[str, Any] = {"host": host, "protocol": server.protocol}
            if server.protocol == "ws":
                entry["protocol"] = "wss" if server.secure else "ws"
            entry["description"] = "NATS server" + (" (TLS)" if server.secure else "")
            if server.credentials:
                entry["security"] = [
                    {"$ref": f"#/components/securitySchemes/{name}"} for name in server.credentials
                ]
                used.update(server.credentials)
            servers[self.key(host)] = entry
        return servers, used
