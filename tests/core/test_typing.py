"""The public API's static types catch misuse: checked by running mypy."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from mypy import api as mypy_api

ROOT = Path(__file__).resolve().parents[2]
CHECKS = ROOT / "tests" / "typing" / "check_api.py"
IGNORE = re.compile(r"\s*# type: ignore\[([a-z-]+)\].*$")
ERROR = re.compile(r"^.*?:(\d+): error: (.*?)\s+\[([a-z-]+)\]$")


@pytest.mark.slow
def test_mypy_reports_exactly_the_marked_errors(tmp_path: Path) -> None:
    expected: dict[int, str] = {}
    stripped: list[str] = []
    for lineno, line in enumerate(CHECKS.read_text().splitlines(), start=1):
        match = IGNORE.search(line)
        if match:
            expected[lineno] = match.group(1)
        stripped.append(line[: match.start()] if match else line)
    assert len(expected) >= 8
    target = tmp_path / "check_api_stripped.py"
    target.write_text("\n".join(stripped) + "\n")

    stdout, stderr, _ = mypy_api.run(
        [
            "--config-file",
            str(ROOT / "pyproject.toml"),
            "--no-incremental",
            "--no-error-summary",
            "--show-error-codes",
            str(target),
        ]
    )
    assert not stderr
    found: dict[int, str] = {}
    messages: dict[int, str] = {}
    for line in stdout.splitlines():
        match = ERROR.match(line)
        if match:
            found[int(match.group(1))] = match.group(3)
            messages[int(match.group(1))] = match.group(2)
    assert found == expected, stdout

    # The two errors the issue names, with mypy's own words.
    publish_line = next(n for n, m in messages.items() if '"publish"' in m)
    assert 'incompatible type "Customer"; expected "Order"' in messages[publish_line]
    assert (
        'Argument 1 to "encode" of "JsonCodec" has incompatible type "Customer"; '
        'expected "Order"' in messages.values()
    )
