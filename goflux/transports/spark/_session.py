"""``local_session``: a SparkSession set up to run goflux's data source on this machine."""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

__all__ = ("local_session",)


def local_session(
    master: str = "local[2]", *, app_name: str = "goflux", **conf: str
) -> SparkSession:
    """Build (or get) a SparkSession whose Python workers run this interpreter.

    Sets ``PYSPARK_PYTHON`` to ``sys.executable`` when unset (otherwise workers run
    ``python3`` from ``PATH``, which may not have goflux or pyarrow installed), turns the
    UI off, uses few shuffle partitions and shows timestamps in UTC (collected rows
    then carry UTC wall-clock times). ``conf`` adds Spark settings.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "4")
        .config("spark.sql.session.timeZone", "UTC")
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
