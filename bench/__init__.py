"""Benchmarks: side-by-side measurements printed as ratios (``python -m bench``)."""
