"""A Spark stream through a real network file system (issue 36): host alpha owns a queue and puts
into it through the real directory all along; host beta (this process's Spark query) reads it
through an sshfs mount (tests/support/sshfs.py) into a journaled sink on its own disk, is stopped
in the middle and restarted from its checkpoint while alpha keeps putting.  The sink ends with
every item exactly once, none missing; meanwhile alpha's archiving followed the query's bookmark,
written through the mount, without taking a file the restarted query still needed.

One bounded test: Spark is heavy (a JVM and Python workers), and this machine's cores are shared.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")
if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java, and there is none here", allow_module_level=True)

import journaled  # noqa: E402
from journaled.disk.bookmarks import read_bookmark  # noqa: E402
from journaled.offline.scan import JournalScanner  # noqa: E402
from support.sparksession import local_session  # noqa: E402
from support.sshfs import env, mounted  # noqa: E402

N = 3000  # items alpha puts, 150 every 0.1 s at most: about 2 s of puts, more on a busy machine

ALPHA = textwrap.dedent(
    """
    import json, sys, time
    from journaled import JournaledQueue, QueueConfig
    q = JournaledQueue(sys.argv[1], QueueConfig(sync="always", journal_size=16384), name="q")
    # each line on stdin: put up to that many items in all, then say how far and how many files
    print(json.dumps({"files": len(q.journal.files)}), flush=True)
    i = 0
    for line in sys.stdin:
        until = int(line)
        while i < until:
            q.put_many([b"a%05d" % k for k in range(i, min(i + 150, until))])
            i = min(i + 150, until)
            time.sleep(0.1)
        print(json.dumps({"put": i, "files": len(q.journal.files)}), flush=True)
    q.close()
    """
)


@pytest.fixture
def sshfs(tmp_path) -> Iterator[tuple[str, str]]:
    with mounted(tmp_path) as dirs:
        yield dirs


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    from journaled.spark import JournaledDataSource

    mine = SparkSession.getActiveSession() is None  # else tests/spark's session, left running
    session = local_session("journaled-sshfs")
    session.dataSource.register(JournaledDataSource)
    yield session
    if mine:
        session.stop()


def start_query(spark, src: str, dst: str, cp: str):
    return (
        spark.readStream.format("journaled")
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", "400")
        .load(src)
        .selectExpr("value")
        .writeStream.format("journaled")
        .option("checkpointLocation", cp)
        .trigger(processingTime="500 milliseconds")
        .start(dst)
    )


def test_a_spark_stream_through_sshfs_is_exactly_once_through_a_restart(spark, sshfs, tmp_path) -> None:
    share, mnt = sshfs
    real, through_mount = os.path.join(share, "q"), os.path.join(mnt, "q")
    dst, cp = str(tmp_path / "dst"), str(tmp_path / "cp")
    alpha = subprocess.Popen(
        [sys.executable, "-c", ALPHA, real, str(N)],
        env=env("alpha"),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert alpha.stdin is not None and alpha.stdout is not None

    def put_until(n: int) -> dict[str, int]:
        alpha.stdin.write(f"{n}\n")  # type: ignore[union-attr]
        alpha.stdin.flush()  # type: ignore[union-attr]
        return json.loads(alpha.stdout.readline())  # type: ignore[union-attr]

    query = None
    try:
        json.loads(alpha.stdout.readline())
        put_until(N // 3)
        query = start_query(spark, through_mount, dst, cp)
        first = put_until(2 * N // 3)  # alpha puts while the first query runs
        deadline = time.monotonic() + 120
        while not os.path.exists(os.path.join(cp, "commits", "1")) and time.monotonic() < deadline:
            # two batches committed before it is stopped (stopped before its first, Spark 4 itself
            # refuses the checkpoint: "STATE_STORE_CHECKPOINT_LOCATION_NOT_EMPTY ... on batch 0")
            time.sleep(0.2)
        batches = sum(1 for p in query.recentProgress if p["numInputRows"])
        query.stop()  # in the middle of whatever it was doing
        query.awaitTermination(60)
        stopped_at = read_bookmark(real, "spark")
        files_at_stop = first["files"]

        query = start_query(spark, through_mount, dst, cp)  # the same checkpoint: a restart
        last = put_until(N)  # alpha keeps putting while the second query runs
        query.processAllAvailable()
        batches2 = sum(1 for p in query.recentProgress if p["numInputRows"])
        query.stop()
        query.awaitTermination(60)
        query = None
        bookmark = read_bookmark(real, "spark")
        deadline = time.monotonic() + 10  # alpha's archiving follows the bookmark within a period
        while (files_end := put_until(N)["files"]) > 1 and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        if query is not None:
            query.stop()
        alpha.stdin.close()
        alpha.wait(timeout=60)
    assert alpha.returncode == 0

    with journaled.JournaledQueue(dst):  # adopts what the sink spooled
        pass
    got = [r.payload for r in JournalScanner(dst).records()]
    want = [b"a%05d" % k for k in range(N)]
    dupes = len(got) - len(set(got))
    missing = sorted(set(want) - set(got))
    print(
        f"through sshfs: {len(got)} rows for {N} items ({dupes} duplicates, {len(missing)} missing); "
        f"{batches} batches before the stop (bookmark {stopped_at}), {batches2} after; alpha's journal "
        f"{last['files']} files at the end of its puts (at the stop {files_at_stop}), {files_end} "
        f"after the final bookmark {bookmark}"
    )
    assert missing == [], f"{len(missing)} items missing after the restart: {missing[:5]}"
    assert dupes == 0, f"{dupes} items delivered twice through the restart"
    assert sorted(got) == want
    assert batches >= 1 and batches2 >= 1, (batches, batches2)
    assert bookmark is not None and stopped_at is not None and stopped_at < bookmark <= N + 1, bookmark
    # unarchived, 3000 items fill 7 or more journal files of 16 KiB; the bookmark may lag a batch
    assert files_end <= 2, f"alpha did not archive behind the bookmark {bookmark}: {files_end} files"
