"""Through Spark: micro-batches ending inside a compressed unit deliver every item exactly once
(issue 39: with maxRecordsPerTrigger=777 over 3,000 zstd items in units of 1,000, availableNow
delivered 1,338 rows).  The JVM-free checks of every boundary are in test_zspark_batches.py."""

from __future__ import annotations

import os
import shutil

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java, and there is none here", allow_module_level=True)

import journaled  # noqa: E402
from journaled.config import QueueConfig  # noqa: E402
from journaled.format import compressed  # noqa: E402
from journaled.offline.scan import JournalScanner  # noqa: E402
from journaled.offline.segments import QueueView  # noqa: E402
from support.sparksession import local_session  # noqa: E402
from support.zspark_queues import all_records  # noqa: E402

if not compressed.available():
    pytest.skip("no compression codec here", allow_module_level=True)


@pytest.fixture(scope="module")
def spark():
    """The session test_spark.py opened when it ran first (getOrCreate), else one of our own."""
    from pyspark.sql import SparkSession

    from journaled.spark import JournaledDataSource

    ours = SparkSession.getActiveSession() is None
    session = local_session("journaled-tests")
    session.dataSource.register(JournaledDataSource)
    yield session
    if ours:
        session.stop()


def test_micro_batches_ending_inside_compressed_units_deliver_every_item_once(spark, tmp_path):
    src, dst = str(tmp_path / "src"), str(tmp_path / "dst")
    items = [b'{"i": %d}' % i for i in range(300)]
    with journaled.JournaledQueue(src, QueueConfig(compression="zstd", sync="never")) as q:
        for b in range(3):
            q.put_many(items[b * 100 : (b + 1) * 100])
    records = all_records(QueueView(src))
    assert len({r[:2] for r in records}) == 3  # three units of 100 ids: every batch below ends inside one
    query = (
        spark.readStream.format("journaled")
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", 77)
        .load(src)
        .selectExpr("value")
        .writeStream.format("journaled")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start(dst)
    )
    query.awaitTermination()
    batches = [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]
    with journaled.JournaledQueue(dst):  # adopts what the sink spooled
        pass
    got = [r.payload for r in JournalScanner(dst).records()]
    assert (batches, len(got)) == ([77, 77, 77, 69], 300)
    assert got == items
