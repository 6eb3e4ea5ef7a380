"""Read the ledgers ``examples/payments_service.py`` writes (one file per process)."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class ProcessLedger:
    worker: str
    pid: int
    begun: list[tuple[str, int]] = field(default_factory=list)
    done: list[tuple[str, int]] = field(default_factory=list)

    @property
    def unfinished(self) -> set[str]:
        """Orders whose handler began here and did not finish here."""
        return {order for order, _ in self.begun} - {order for order, _ in self.done}


def read_ledgers(directory: Path) -> dict[int, ProcessLedger]:
    """Every process's ledger, by pid."""
    ledgers = {}
    for path in sorted(directory.glob("ledger-*-*.txt")):
        _, worker, pid = path.stem.split("-")
        ledger = ledgers[int(pid)] = ProcessLedger(worker, int(pid))
        for line in path.read_text().splitlines():
            what, order, delivered = line.split()
            (ledger.begun if what == "begin" else ledger.done).append((order, int(delivered)))
    return ledgers


def done_counts(ledgers: dict[int, ProcessLedger]) -> Counter[str]:
    """How many times each order was charged, over all processes."""
    return Counter(order for ledger in ledgers.values() for order, _ in ledger.done)


def done_lines(directory: Path) -> int:
    """Charged orders so far, over all ledgers (cheap: counts lines starting with 'done')."""
    return sum(path.read_text().count("done ") for path in directory.glob("ledger-*-*.txt"))
