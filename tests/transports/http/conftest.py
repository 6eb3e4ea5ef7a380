"""A real uvicorn server on a loopback port for the HTTP transport's tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import pytest

from goflux.service._health import ASGIApp
from goflux.service._http import HttpServer

Serve = Callable[[ASGIApp], AbstractAsyncContextManager[str]]


@asynccontextmanager
async def serve(app: ASGIApp) -> AsyncIterator[str]:
    """Serve ``app`` with uvicorn on 127.0.0.1 (a free port); yield its base URL."""
    async with HttpServer(app, "127.0.0.1", 0) as server:
        yield f"http://127.0.0.1:{server.port}"


@pytest.fixture
def served() -> Serve:
    return serve
