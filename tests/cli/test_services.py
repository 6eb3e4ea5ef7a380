"""``goflux services`` against a real server: goflux and nats.js micro services."""

from __future__ import annotations

import asyncio
import json
import time

import nats
import pytest
from nats.aio.client import Client

from goflux import StrCodec
from goflux.cli import main
from goflux.testing import NatsServer
from goflux.transports import nats as gnats
from tests.nodejs import node_peer

QUICK = ("--timeout", "0.5")  # answers on a local server take milliseconds
HEADER = ["name", "id", "version", "endpoint", "subject", "queue", "requests", "errors", "average"]


async def goflux(*args: str) -> int:
    """Run the command line in a thread (it runs its own event loop)."""
    return await asyncio.to_thread(main, list(args))


async def echo(text: str) -> str:
    if text == "fail":
        raise ValueError("asked to fail")
    return text


async def test_lists_a_goflux_service_as_a_table_and_as_json(
    nc: Client, nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    svc = gnats.MicroService(nc, name="echo", version="2.0.0", description="Echoes")
    other = gnats.MicroService(nc, name="other", version="1.0.0")  # no endpoints
    async with (
        svc,
        other,
        gnats.Responder(nc, StrCodec(), StrCodec(), service=svc) as responder,
    ):
        await other.start()
        await responder.start("echo.say", echo)
        await responder.start("echo.shout", echo, endpoint="shout")
        for text in ("a", "b", "fail"):
            await nc.request("echo.say", text.encode(), timeout=5)
        assert await goflux("services", "--server", nats_url, *QUICK) == 0
        lines = capsys.readouterr().out.splitlines()
        assert lines[0].split() == HEADER
        rows = sorted(line.split() for line in lines[1:])
        average = svc.stats().endpoints[0].average_processing_time
        assert rows[0][:8] == ["echo", svc.id, "2.0.0", "echo-say", "echo.say", "q", "3", "1"]
        assert rows[0][8].endswith(("ns", "us", "ms", "s"))
        assert average > 0
        assert rows[1] == ["echo", svc.id, "2.0.0", "shout", "echo.shout", "q", "0", "0", "0ns"]
        assert rows[2] == ["other", other.id, "1.0.0", "-", "-", "-", "-", "-", "-"]
        assert len(rows) == 3

        assert await goflux("services", "--url", nats_url, *QUICK, "--json", "echo") == 0
        (found,) = json.loads(capsys.readouterr().out)  # only the services named echo
        assert found["info"] == svc.info().as_dict()
        stats = found["stats"]
        assert stats["id"] == svc.id
        assert [(e["name"], e["num_requests"], e["num_errors"]) for e in stats["endpoints"]] == [
            ("echo-say", 3, 1),
            ("shout", 0, 0),
        ]
        assert stats["endpoints"][0]["last_error"] == "500:ValueError: asked to fail"


async def test_no_services_says_so_at_once(
    nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    began = time.perf_counter()
    assert await goflux("services", "--server", nats_url, "--timeout", "10") == 0
    assert capsys.readouterr().out == "no services\n"
    assert await goflux("services", "--server", nats_url, "--timeout", "10", "billing") == 0
    assert capsys.readouterr().out == "no services named 'billing'\n"
    assert await goflux("services", "--server", nats_url, "--json") == 0
    assert json.loads(capsys.readouterr().out) == []
    assert time.perf_counter() - began < 5  # the server's "no responders": no 10 s wait


@pytest.mark.slow  # nats-py waits 2 s before it gives up
async def test_an_unreachable_server_is_one_line_without_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with NatsServer(jetstream=False) as server:
        url = server.url
    assert await goflux("services", "--server", url) == 2  # like every goflux command
    err = capsys.readouterr().err
    assert err.startswith(f"goflux services: OSError: cannot reach a NATS server at {url}")
    assert err.count("\n") == 1


def test_a_bad_name_or_timeout_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    for args in (["pricing.v1"], ["--timeout", "0"]):
        with pytest.raises(SystemExit) as exit_:
            main(["services", *args])
        assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid service name 'pricing.v1'" in err
    assert "must be > 0 seconds" in err


@pytest.mark.e2e  # starts Node.js; the fast tier has the other direction (test_nats_micro)
async def test_lists_a_nodejs_micro_service(
    nats_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async with node_peer("micro_service.mjs", nats_url) as peer:
        nc = await nats.connect(nats_url)
        try:
            for text in ("hello", "fail", "again"):
                await nc.request("node.echo", text.encode(), timeout=5)
        finally:
            await nc.close()
        assert await goflux("services", "--server", nats_url, *QUICK) == 0
        lines = capsys.readouterr().out.splitlines()
        assert await goflux("services", "--server", nats_url, *QUICK, "--json", "node-echo") == 0
        (found,) = json.loads(capsys.readouterr().out)
    assert lines[0].split() == HEADER
    (row,) = lines[1:]
    node_id = peer.ready["id"]
    assert row.split()[:8] == ["node-echo", node_id, "1.0.0", "echo", "node.echo", "q", "3", "1"]
    assert found["info"]["description"] == "echoes requests"
    assert found["info"]["metadata"] == {"language": "javascript"}
    assert found["info"]["endpoints"][0]["metadata"] == {"kind": "echo"}
    assert found["stats"]["endpoints"][0]["last_error"] == "asked to fail"
