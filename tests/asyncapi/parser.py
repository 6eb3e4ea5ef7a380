"""The official AsyncAPI parser (@asyncapi/parser, from npm: tests/node) as a test helper."""

from __future__ import annotations

import json
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

NODE_DIR = Path(__file__).resolve().parent.parent / "node"
VALIDATOR = NODE_DIR / "validate_asyncapi.mjs"

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
    """Run the parser on each document (JSON or YAML text) in one Node process."""
    node = shutil.which("node")
    assert node is not None, "the tests need Node.js (scripts/node-clients.sh installs its parts)"
    assert (NODE_DIR / "node_modules" / "@asyncapi" / "parser").is_dir(), (
        "run scripts/node-clients.sh (or scripts/check.sh) to install tests/node"
    )
    with tempfile.TemporaryDirectory() as tmp:
        files = []
        for n, text in enumerate(documents):
            path = Path(tmp) / f"doc{n}.txt"
            path.write_text(text, encoding="utf-8")
            files.append(str(path))
        result = subprocess.run(
            [node, str(VALIDATOR), *files],
            capture_output=True,
            text=True,
            timeout=40,  # below the 60 s of the tests that call it
            check=False,
            cwd=NODE_DIR,
        )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.strip()]
    assert len(lines) == len(documents), result.stderr
    return [Verdict(line["valid"], line["version"], line["diagnostics"]) for line in lines]
