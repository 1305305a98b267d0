"""The local SparkSession the Spark tests share (one JVM per test process, by ``getOrCreate``)."""

from __future__ import annotations

import os
import sys
from typing import Any

from support.paths import ROOT


def local_session(app_name: str) -> Any:
    """A ``local[1]`` session whose Python workers run this interpreter on this checkout (an
    editable install hides pyspark_journaled.py from the workers' module scan; the repository
    root on their path stands in for a regular install), quiet, one shuffle partition.  The
    session a test file before opened, if any, is the one returned (``getOrCreate``)."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[1]")
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    return session
