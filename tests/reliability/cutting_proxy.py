"""A TCP proxy in front of a real nats-server that cuts a connection on a given command.

It stands for the network (or a server's reset) losing a connection at a chosen point:
when the client sends ``cut_on`` (such as ``b"PUB core.z "``), the proxy drops that
connection without forwarding the chunk that holds it, once. Every other byte passes
unchanged both ways, and the client's reconnection goes through the proxy again.
"""

from __future__ import annotations

import asyncio
import contextlib
from types import TracebackType
from typing import Self


class CuttingProxy:
    """Forwards ``127.0.0.1:<port>`` to ``target_port``; :meth:`arm` cuts once on a command.

    Attributes:
        cut: Set once a connection has been cut.
    """

    def __init__(self, target_port: int) -> None:
        self._target_port = target_port
        self._server: asyncio.Server | None = None
        self._cut_on: bytes | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self.cut = asyncio.Event()

    @property
    def url(self) -> str:
        """The proxy's ``nats://`` URL."""
        assert self._server is not None, "not started"
        port = self._server.sockets[0].getsockname()[1]
        return f"nats://127.0.0.1:{port}"

    def arm(self, cut_on: bytes) -> None:
        """Cut the connection whose client next sends ``cut_on`` (that chunk is not sent)."""
        self.cut.clear()
        self._cut_on = cut_on

    async def __aenter__(self) -> Self:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._server is not None
        self._server.close()
        for writer in list(self._writers):
            writer.close()
        await self._server.wait_closed()

    async def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection("127.0.0.1", self._target_port)
        self._writers.update((client_w, server_w))

        def close() -> None:
            for writer in (client_w, server_w):
                writer.close()
                self._writers.discard(writer)

        async def pump(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter, up: bool
        ) -> None:
            with contextlib.suppress(OSError):
                while chunk := await reader.read(65536):
                    if up and self._cut_on is not None and self._cut_on in chunk:
                        self._cut_on = None
                        close()
                        self.cut.set()
                        return
                    writer.write(chunk)
                    await writer.drain()
            close()

        await asyncio.gather(pump(client_r, server_w, True), pump(server_r, client_w, False))
