"""The official AsyncAPI parser (@asyncapi/parser, from npm: tests/node) as a test helper."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.nodejs import NODE_DIR, NodeService

# One Node process for every document this test process validates: loading the parser
# takes about 2 s, a document then a few tenths of a second.
VALIDATOR = NodeService("validate_asyncapi.mjs")

# Information the parser gives on every 3.0.0 document: a newer minor version exists.
NEWER_VERSION = "asyncapi-latest-version"


@dataclass(frozen=True)
class Verdict:
    valid: bool
    version: str | None
    diagnostics: list[dict[str, Any]]

    @property
    def problems(self) -> list[dict[str, Any]]:
        """Errors and warnings (severity 0 and 1): none may be left."""
        return [d for d in self.diagnostics if d["severity"] <= 1]


def parse(*documents: str) -> list[Verdict]:
    """Run the parser on each document (JSON or YAML text), one after the other."""
    assert (NODE_DIR / "node_modules" / "@asyncapi" / "parser").is_dir(), (
        "run scripts/node-clients.sh (or scripts/check.sh) to install tests/node"
    )
    verdicts = []
    with tempfile.TemporaryDirectory() as tmp:
        for n, text in enumerate(documents):
            path = Path(tmp) / f"doc{n}.txt"
            path.write_text(text, encoding="utf-8")
            found = VALIDATOR.ask(str(path))
            verdicts.append(Verdict(found["valid"], found["version"], found["diagnostics"]))
    return verdicts
