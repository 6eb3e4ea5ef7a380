"""``goflux asyncapi`` as a user runs it: the examples' documents, files, errors, --serve."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from goflux.testing import NatsServer
from tests.asyncapi.parser import parse
from tests.asyncapi.test_document import monitor

ROOT = Path(__file__).resolve().parent.parent.parent

pytestmark = pytest.mark.e2e  # runs the examples through the command line, as a user would


@pytest.fixture(scope="module")
def server() -> Iterator[NatsServer]:
    with NatsServer(args=["-m", "-1"]) as running:
        yield running


def goflux(server: NatsServer, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "goflux", "asyncapi", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={**os.environ, "NATS_URL": server.url},
        check=False,
    )


def test_the_examples_documents_validate_and_are_stable(server: NatsServer) -> None:
    documents = {}
    for spec in ("examples.pricing_service:service", "examples.payments_service:service"):
        first = goflux(server, spec)
        second = goflux(server, spec)
        assert first.returncode == 0, first.stderr
        assert first.stdout == second.stdout, f"{spec}: not byte-for-byte stable"
        documents[spec] = first.stdout
    verdicts = parse(*documents.values())
    for spec, verdict in zip(documents, verdicts, strict=True):
        assert verdict.valid, (spec, verdict.diagnostics)
        assert verdict.problems == [], (spec, verdict.problems)
    pricing = json.loads(documents["examples.pricing_service:service"])
    addresses = sorted(c["address"] or "(reply)" for c in pricing["channels"].values())
    assert addresses == ["(reply)", "prices.{token2}", "pricing.quote", "stock.{token2}.level"]
    schemas = pricing["components"]["schemas"]
    # Money is in Quote (total), PricedLine (price) and PriceChanged; Line in two models:
    # each defined once, everywhere else a $ref
    text = documents["examples.pricing_service:service"]
    assert text.count('"currency": {') == 1
    assert text.count('"quantity": {') == 1
    assert schemas["PricedLine"]["properties"]["price"] == {"$ref": "#/components/schemas/Money"}
    assert pricing["info"]["title"] == "pricing"
    payments = json.loads(documents["examples.payments_service:service"])
    assert [c["address"] for c in payments["channels"].values()] == ["orders.created"]
    # describing the services created nothing on the server: no stream, no consumer
    state = monitor(server, "jsz")
    assert (state["streams"], state["consumers"]) == (0, 0)


def test_yaml_to_a_file(server: NatsServer, tmp_path: Path) -> None:
    out = tmp_path / "asyncapi.yaml"
    done = goflux(server, "examples.pricing_service:service", "--format", "yaml", "--out", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    as_json = goflux(server, "examples.pricing_service:service")
    assert yaml.safe_load(out.read_text()) == json.loads(as_json.stdout)
    (verdict,) = parse(out.read_text())
    assert verdict.valid, verdict.diagnostics
    assert verdict.problems == []


def test_left_out_endpoints_are_named_on_stderr(server: NatsServer) -> None:
    done = goflux(server, "tests.asyncapi.services:everything")
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip() == (
        "goflux asyncapi: left out subscription to 'in.process': an in-process channel, not on NATS"
    )


def test_exit_2_when_the_service_cannot_be_loaded(server: NatsServer) -> None:
    done = goflux(server, "examples.nowhere:service")
    assert done.returncode == 2
    assert "no module named 'examples.nowhere'" in done.stderr
    assert "Traceback" not in done.stderr


def test_exit_1_when_the_service_function_fails(server: NatsServer) -> None:
    done = goflux(server, "tests.asyncapi.services:failing")
    assert done.returncode == 1
    assert "no configuration for the pricing table" in done.stderr
    assert "Traceback" not in done.stderr
    assert done.stdout == ""


def test_serve_renders_the_document(server: NatsServer) -> None:
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "goflux",
            "asyncapi",
            "examples.pricing_service:service",
            "--serve",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "NATS_URL": server.url},
    ) as process:
        try:
            serve_and_check(process)
        finally:
            process.send_signal(signal.SIGINT)
            assert process.wait(timeout=20) == 0


def serve_and_check(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    line = process.stdout.readline()  # printed once the port is bound
    assert "AsyncAPI document of 'pricing' on http://127.0.0.1:" in line, (
        line + process.stderr.read() if process.stderr else line
    )
    base = line.split(" on ", 1)[1].split(" ", 1)[0].rstrip("/")
    page = httpx.get(base + "/", timeout=10)
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "AsyncApiStandalone.render(" in page.text
    assert "@asyncapi/react-component@3.2.1/browser/standalone/index.js" in page.text
    as_json = httpx.get(base + "/asyncapi.json", timeout=10)
    document = as_json.json()
    assert document["info"]["title"] == "pricing"
    assert json.dumps(document, ensure_ascii=False) in page.text  # embedded as is
    assert yaml.safe_load(httpx.get(base + "/asyncapi.yaml", timeout=10).text) == document
    assert httpx.get(base + "/nothing", timeout=10).status_code == 404
    assert httpx.post(base + "/", timeout=10).status_code == 405


def test_awkward_payload_types_validate_and_are_stable(server: NatsServer) -> None:
    runs = [goflux(server, "tests.asyncapi.services:awkward") for _ in range(2)]
    for done in runs:
        assert done.returncode == 0, done.stderr
    first, second = (done.stdout for done in runs)
    assert first == second, "not the same bytes in two processes"
    assert " at 0x" not in first  # no memory address (validators, lambdas) in names
    (verdict,) = parse(first)
    assert verdict.valid, verdict.diagnostics
    assert verdict.problems == []
    json.loads(first)  # strict JSON: no NaN or Infinity tokens
    document = json.loads(first)
    schemas = document["components"]["schemas"]
    assert schemas["Pet"]["properties"]["animal"]["discriminator"] == "kind"
    assert schemas["Limits"]["properties"]["ceiling"]["default"] == "Infinity"
    # a user model named like goflux's header schema keeps its name; goflux's are apart
    assert set(schemas["GofluxHeaders"]["properties"]) == {"tenant"}
    assert "X-Message-ID" in schemas["goflux.Headers"]["properties"]
    adopt = document["operations"]["receive.pets.adopt"]["bindings"]["nats"]
    assert adopt["x-nats-micro"] == {
        "service": "awkward",
        "version": "1.0.0",
        "endpoint": "pets-adopt",
    }
    assert "goflux asyncapi: left out the schema of payload 'Wrapped': Cannot generate" in (
        runs[0].stderr
    )
    yaml_text = goflux(server, "tests.asyncapi.services:awkward", "--format", "yaml").stdout
    assert "&id" not in yaml_text  # no anchors and aliases: every value written out
    assert yaml.safe_load(yaml_text) == document
