"""A PNG bar chart of every table's ratios to its raw baseline (needs matplotlib)."""

from __future__ import annotations

from pathlib import Path

from bench.harness import Table


def draw(tables: list[Table], path: Path) -> bool:
    """Write the chart; False (and no file) when matplotlib is not installed."""
    try:
        import matplotlib as mpl  # noqa: PLC0415 - optional

        mpl.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    labels: list[str] = []
    ratios: list[float] = []
    colors: list[str] = []
    for table in tables:
        for name in table.results:
            if name == table.baseline:
                continue
            labels.append(f"{table.key}: {name}")
            ratios.append(table.ratio(name))
            colors.append(
                "#d98c3a"
                if "FastStream" in name
                else "#9a9a9a"
                if name.startswith(("raw", "hand-written")) and "goflux" not in name
                else "#3a78b5"
            )
    fig, ax = plt.subplots(figsize=(10, 0.32 * len(labels) + 1.2))
    positions = range(len(labels))
    ax.barh(list(positions), ratios, color=colors)
    ax.set_yticks(list(positions), labels, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(1.0, color="black", linewidth=0.8)
    for y, value in zip(positions, ratios, strict=True):
        ax.text(value, y, f" {value:.2f}", va="center", fontsize=7)
    ax.set_xlabel("median rate / raw baseline of its table (1.0 = as fast as raw)")
    ax.set_title("goflux (blue), FastStream (orange) and other raw paths (grey) against raw")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
