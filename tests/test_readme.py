"""Every Python code block in README.md runs and prints what the README implies."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)

EXPECTED_OUTPUT = [
    "orders.created: o-1 9.50 id=o-1\n",
    "stored at ORDERS#1\ngot o-1 (delivery 1)\n",
    "sku='apple' total=10.0\nremote error 404: unknown sku\n",
    "o-1: delivery 1\no-2: delivery 1\no-2: delivery 2\no-2: delivery 3\ndead letters: 1\n",
    "[1, 4, 9, 16, 25]\n[0, 1]\n[2, 3]\n[4]\n",
    "SinkStats(batch_id=0, published=2, duplicates=0)\nc-0 60.0 3\nc-1 90.0 3\n",
    "nats-server back on nats://127.0.0.1:",
]


@pytest.mark.spark  # the Spark adapter's block starts a local session
def test_every_python_block_runs() -> None:
    blocks = BLOCK.findall(README.read_text())
    assert len(blocks) == len(EXPECTED_OUTPUT), "add the new block's expected output here"
    for code, expected in zip(blocks, EXPECTED_OUTPUT, strict=True):
        result = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=180, check=False
        )
        assert result.returncode == 0, f"{result.stderr}\n--- block:\n{code}"
        assert expected in result.stdout, result.stdout
