"""Ask health probes over real HTTP until they say what a test waits for."""

from __future__ import annotations

import httpx


async def until_status(http: httpx.AsyncClient, url: str, status: int) -> httpx.Response:
    """GET ``url`` until it answers ``status`` (the caller bounds the wait).

    Each try is a real round trip to the probe server, the signal itself.
    """
    while True:
        try:
            response = await http.get(url)
        except httpx.TransportError:
            continue
        if response.status_code == status:
            return response
