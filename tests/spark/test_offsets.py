"""The Spark source the way Kafka users expect it: minOffsetsPerTrigger with maxTriggerDelay,
the latest offset in the query's progress, the query's bookmark in `journaled stat`, and the
"coming from Kafka" table in docs/spark.md."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import journaled
from journaled.config import QueueConfig
from journaled.disk.bookmarks import write_bookmark
from support.imports import run_and_list_modules
from support.paths import ROOT as PROJECT_ROOT
from support.sparksession import local_session

ROOT = Path(PROJECT_ROOT)
SMALL = QueueConfig(journal_size=4096, sync="never")


def fill(path, items, config=SMALL):
    with journaled.JournaledQueue(path, config) as q:
        return q.put_many(items)


def stat_json(path):
    proc = subprocess.run(
        [sys.executable, "-m", "journaled", "stat", "--json", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# ---------------------------------------------------------------- journaled stat (no Spark)


def test_stat_shows_an_external_reader_bookmark_with_its_lag(tmp_path):
    q = tmp_path / "q"
    fill(str(q), [b"x"] * 30)  # ids 1..30
    write_bookmark(str(q), "spark", 21)  # the query still needs ids 21.. : 10 behind
    st = stat_json(q)
    assert [(r["name"], r["head"], r["lag"]) for r in st["external_readers"]] == [("spark", 21, 10)]
    assert st["external_readers"][0]["bookmark_age_s"] >= 0
    text = subprocess.run(
        [sys.executable, "-m", "journaled", "stat", str(q)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    ).stdout
    assert "external reader spark: head 21, lag 10" in text


# ---------------------------------------------------------------- docs/spark.md: coming from Kafka

KAFKA_SOURCE_OPTIONS = [
    "assign",
    "subscribe",
    "subscribePattern",
    "kafka.bootstrap.servers",
    "startingOffsets",
    "startingOffsetsByTimestamp",
    "startingTimestamp",
    "endingOffsets",
    "endingOffsetsByTimestamp",
    "endingTimestamp",
    "failOnDataLoss",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "groupIdPrefix",
    "kafka.group.id",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
]


def _section(text: str, title: str) -> str:
    m = re.search(rf"^(#+) {re.escape(title)}.*?$(.*?)(?=^#{{1,3}} |\Z)", text, re.M | re.S | re.I)
    assert m, f"docs/spark.md has no section {title!r}"
    return m.group(2)


def test_spark_md_maps_every_kafka_source_option_to_ours():
    text = (ROOT / "docs" / "spark.md").read_text(encoding="utf-8")
    table = _section(text, "Coming from Kafka")
    rows = [line.split("|")[1:-1] for line in table.splitlines() if line.startswith("| `")]
    kafka = {name for cells in rows for name in re.findall(r"`([^`]+)`", cells[0])}
    assert set(KAFKA_SOURCE_OPTIONS) <= kafka, set(KAFKA_SOURCE_OPTIONS) - kafka
    ours_documented = set(re.findall(r"^\| `(\w+)`", _section(text, "Source:"), re.M))
    for cells in rows:
        for ours in re.findall(r"`(\w+)`", cells[1]):
            if ours[0].islower() and any(c.isupper() for c in ours):  # an option name (camelCase)
                assert ours in ours_documented, f"{ours} (for {cells[0].strip()}) is not a documented option"


def test_a_schema_the_query_names_may_hold_any_source_columns_in_any_order_and_case():
    from journaled.spark.offsets import COLUMN_TYPES, check_columns

    check_columns([("value", "binary", True)])
    check_columns(
        [("Queue", "string", False), ("ID", "bigint", False), ("headers", COLUMN_TYPES["headers"], True)]
    )
    check_columns([(name, kind, True) for name, kind in COLUMN_TYPES.items()])


@pytest.mark.parametrize(
    ("columns", "message"),
    [
        ([], "at least one column"),
        ([("payload", "binary", True)], "no column 'payload'"),
        ([("value", "string", True)], "is binary, not string"),
        ([("timestamp", "timestamp_ntz", True)], "is timestamp, not timestamp_ntz"),
        ([("id", "int", True)], "is bigint, not int"),
        ([("key", "binary", False)], "cannot be NOT NULL"),
        ([("value", "binary", True), ("VALUE", "binary", True)], "named twice"),
    ],
)
def test_a_schema_the_source_cannot_fill_is_refused_with_what_it_has(columns, message):
    from journaled.spark.offsets import OptionError, check_columns

    with pytest.raises(OptionError, match=message):
        check_columns(columns)


# ---------------------------------------------------------------- the stream reader, driven directly

pyspark = pytest.importorskip("pyspark", reason="the spark extra is not installed")
pytest.importorskip("pyarrow", reason="the spark extra is not installed")


def stream_reader(path, **options):
    from pyspark.sql.types import StructType

    from journaled.spark.source import JournaledStreamReader

    return JournaledStreamReader(
        {"path": str(path), "startingOffsets": "earliest", **options}, StructType().add("value", "binary")
    )


def ids(offset):
    return next(iter(offset.values()))["id"]


def test_min_offsets_per_trigger_holds_back_a_batch_until_enough_ids_or_max_trigger_delay(tmp_path):
    q = str(tmp_path / "q")
    fill(q, [b"a"] * 5)
    r = stream_reader(q, minOffsetsPerTrigger="10", maxTriggerDelay="800ms")
    limit = r.getDefaultReadLimit()
    start = r.initialOffset()
    assert ids(start) == 1
    first = r.latestOffset(start, limit)
    assert ids(first) == 6  # like Kafka, the first batch is never held back
    fill(q, [b"b"] * 3)
    assert r.latestOffset(first, limit) == first  # 3 < 10 waiting: no batch
    fill(q, [b"c"] * 7)
    second = r.latestOffset(first, limit)
    assert ids(second) == 16  # 10 waiting
    fill(q, [b"d"] * 2)
    assert r.latestOffset(second, limit) == second
    time.sleep(1.0)  # past maxTriggerDelay: the 2 go, fewer than the minimum
    assert ids(r.latestOffset(second, limit)) == 18


def test_min_offsets_per_trigger_combines_with_max_and_never_holds_back_available_now(tmp_path):
    from pyspark.sql.streaming.datasource import ReadMaxRows

    q = str(tmp_path / "q")
    fill(q, [b"a"] * 100)
    r = stream_reader(q, minOffsetsPerTrigger="20", maxOffsetsPerTrigger="30", maxTriggerDelay="1h")
    assert r.getDefaultReadLimit() == ReadMaxRows(30)  # Kafka's name for maxRecordsPerTrigger
    start = r.initialOffset()
    first = r.latestOffset(start, r.getDefaultReadLimit())
    assert ids(first) == 31
    nearly = {k: {"id": 90} for k in first}
    assert r.latestOffset(nearly, r.getDefaultReadLimit()) == nearly  # 11 < 20 waiting
    r.prepareForTriggerAvailableNow()
    assert ids(r.latestOffset(nearly, r.getDefaultReadLimit())) == 101  # must finish: no waiting


def test_a_caught_up_query_leaves_a_bookmark_with_no_lag(tmp_path):
    from journaled.disk.bookmarks import read_bookmark

    q = str(tmp_path / "q")
    fill(q, [b"x"] * 30)  # ids 1..30
    r = stream_reader(q)
    limit = r.getDefaultReadLimit()
    start = r.initialOffset()
    end = r.latestOffset(start, limit)
    r.partitions(start, end)  # batch 0: ids 1..30
    assert read_bookmark(q, "spark") == 1
    # Spark asks for the next batch only once batch 0 is in its commit log; nothing new waits
    assert r.latestOffset(end, limit) == end
    assert read_bookmark(q, "spark") == 31
    (ext,) = stat_json(q)["external_readers"]
    assert (ext["head"], ext["lag"]) == (31, 0)
    r.commit(end)  # Spark's own commit call, one batch late, changes nothing
    assert read_bookmark(q, "spark") == 31


def test_trigger_options_are_checked(tmp_path):
    from journaled.spark import OptionError

    q = str(tmp_path / "q")
    fill(q, [])
    for bad in (
        {"maxTriggerDelay": "soon"},
        {"maxTriggerDelay": "5 parsecs"},
        {"minOffsetsPerTrigger": "-1"},
        {"maxRecordsPerTrigger": "10", "maxOffsetsPerTrigger": "20"},
    ):
        with pytest.raises(OptionError):
            stream_reader(q, **bad)
    assert stream_reader(q, minOffsetsPerTrigger="5").max_delay_s == 15 * 60  # Kafka's default, 15m
    assert stream_reader(q, maxTriggerDelay="2s").max_delay_s == 2


def test_offsets_behind_reads_the_lag_from_a_progress_source():
    from journaled.spark import offsets_behind

    src = {
        "endOffset": '{"/a": {"id": 11}, "/b": {"id": 5}}',
        "latestOffset": '{"/a": {"id": 101}, "/b": {"id": 5}}',
    }
    assert offsets_behind(src) == {"/a": 90, "/b": 0}
    assert offsets_behind({"endOffset": None, "latestOffset": None}) == {}


def test_offsets_behind_leaves_out_what_a_restarted_query_has_not_measured_yet():
    from journaled.spark import offsets_behind

    end = '{"/a": {"id": 11}}'
    # the first entry after a restart: Spark has no latest offset yet, and prints it as JSON
    # null (lastProgress), as Python's None (listener events) or leaves it out
    for latest in ("null", "None", None, "", "  "):
        assert offsets_behind({"startOffset": "null", "endOffset": end, "latestOffset": latest}) == {}
    assert offsets_behind({"startOffset": None, "endOffset": "null", "latestOffset": end}) == {}
    assert offsets_behind({}) == {}
    assert offsets_behind({"endOffset": "{}", "latestOffset": "{}"}) == {}


def test_offsets_behind_reads_parsed_offsets_and_skips_queues_it_cannot_measure():
    from journaled.spark import offsets_behind

    # json.loads(progress.json) gives offsets as objects, not text
    src = {"endOffset": {"/a": {"id": 11}}, "latestOffset": {"/a": {"id": 31}, "/new": {"id": 9}}}
    assert offsets_behind(src) == {"/a": 20}  # /new was never read: its lag is unknown, not 0


def test_offsets_behind_sums_up_a_whole_progress_with_several_sources():
    from journaled.spark import offsets_behind

    ours = {
        "description": "journaled",
        "endOffset": '{"/a": {"id": 11}, "/b": {"id": 5}}',
        "latestOffset": '{"/a": {"id": 101}, "/b": {"id": 5}}',
    }
    also_ours = {
        "endOffset": '{"/a": {"id": 51}, "/c": {"id": 2}}',
        "latestOffset": '{"/a": {"id": 101}, "/c": {"id": 7}}',
    }
    kafka = {"endOffset": '{"topic": {"0": 120}}', "latestOffset": '{"topic": {"0": 150}}'}
    restarted = {"endOffset": '{"/d": {"id": 3}}', "latestOffset": "null"}
    progress = {"batchId": 7, "sources": [ours, kafka, also_ours, restarted]}
    expected = {"/a": 90, "/b": 0, "/c": 5}  # a queue read by two sources: the one further behind
    assert offsets_behind(progress) == expected
    assert offsets_behind(progress["sources"]) == expected
    assert offsets_behind({"sources": []}) == {}


def test_offsets_behind_refuses_what_is_not_a_progress():
    from journaled.spark import OptionError, offsets_behind

    for bad in (42, "sources", [42]):
        with pytest.raises(TypeError):
            offsets_behind(bad)
    with pytest.raises(OptionError):  # a single source whose offsets are not ours says so
        offsets_behind({"endOffset": '{"topic": {"0": 1}}', "latestOffset": '{"topic": {"0": 2}}'})


# ---------------------------------------------------------------- a real Spark session

if __import__("shutil").which("java") is None and not os.environ.get("JAVA_HOME"):
    pytest.skip("Spark needs Java, and there is none here", allow_module_level=True)


@pytest.fixture(scope="module")
def spark():
    from journaled.spark import JournaledDataSource

    session = local_session("journaled-option-tests")
    session.dataSource.register(JournaledDataSource)
    yield session


def wait_for(pred, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.2)
    return False


def test_a_running_query_waits_for_min_offsets_per_trigger(spark, tmp_path):
    q = str(tmp_path / "q")
    fill(q, [b"a"] * 50)
    query = (
        spark.readStream.format("journaled")
        .option("startingOffsets", "earliest")
        .option("minOffsetsPerTrigger", 50)
        .option("maxTriggerDelay", "1h")
        .load(q)
        .writeStream.format("memory")
        .queryName("min_offsets")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:

        def count():
            return spark.sql("select count(*) from min_offsets").collect()[0][0]

        assert wait_for(lambda: count() == 50)
        fill(q, [b"b"] * 30)
        time.sleep(4)  # about 20 triggers: each one finds fewer than 50 waiting
        assert count() == 50
        fill(q, [b"c"] * 20)
        assert wait_for(lambda: count() == 100)
    finally:
        query.stop()


def test_progress_reports_the_queues_latest_offset_and_the_query_lag(spark, tmp_path):
    from journaled.spark import offsets_behind

    q, dst = str(tmp_path / "q"), str(tmp_path / "dst")
    fill(q, [b"x"] * 100)
    query = (
        spark.readStream.format("journaled")
        .option("startingOffsets", "earliest")
        .option("maxRecordsPerTrigger", 25)
        .load(q)
        .selectExpr("value")
        .writeStream.format("journaled")
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start(dst)
    )
    query.awaitTermination()
    batches = [p["sources"][0] for p in query.recentProgress if p["numInputRows"]]
    key = os.path.normpath(q)
    assert [json.loads(s["latestOffset"]) for s in batches] == [{key: {"id": 101}}] * 4
    assert [offsets_behind(s) for s in batches] == [{key: 75}, {key: 50}, {key: 25}, {key: 0}]
    # and the query's committed offset is visible to lag monitoring: `journaled stat`
    (ext,) = stat_json(q)["external_readers"]
    assert (ext["name"], ext["head"], ext["lag"]) == ("spark", 101, 0)  # read everything: no lag


def test_lag_reads_true_across_a_restart_of_the_query(spark, tmp_path):
    from journaled.spark import offsets_behind

    q, dst, cp = str(tmp_path / "q"), str(tmp_path / "dst"), str(tmp_path / "cp")
    key = os.path.normpath(q)

    def run():
        query = (
            spark.readStream.format("journaled")
            .option("startingOffsets", "earliest")
            .option("maxRecordsPerTrigger", 40)
            .load(q)
            .selectExpr("value")
            .writeStream.format("journaled")
            .option("checkpointLocation", cp)
            .trigger(availableNow=True)
            .start(dst)
        )
        query.awaitTermination()
        return query.recentProgress

    fill(q, [b"x"] * 100)
    run()
    fill(q, [b"y"] * 60)  # ids 101..160
    progress = run()
    for p in progress:  # every shape this run produced, the first one after the restart too
        assert set(offsets_behind(p)) <= {key}
        for s in p["sources"]:
            assert set(offsets_behind(s)) <= {key}
    assert [offsets_behind(p) for p in progress if p["numInputRows"]] == [{key: 20}, {key: 0}]
    (ext,) = stat_json(q)["external_readers"]
    assert (ext["head"], ext["lag"]) == (161, 0)


# ---------------------------------------------------------------- what Spark's Python workers import

WORKER_IMPORTS = """
import sys
from pyspark.sql.types import StructType
import journaled.spark
src = journaled.spark.JournaledDataSource(options={"path": sys.argv[1], "startingOffsets": "earliest"})
getattr(src, sys.argv[2])(StructType().add("value", "binary"), *sys.argv[3:4] and [False])
"""


def worker_modules(q, method, *extra):
    return run_and_list_modules(WORKER_IMPORTS, q, method, *extra)[1]


def test_planning_and_writing_workers_import_only_their_own_half(tmp_path):
    q = str(tmp_path / "q")
    fill(q, [b"x"] * 3)
    for method in ("reader", "streamReader"):
        mods = worker_modules(q, method)
        assert "journaled.spark.source" in mods
        assert not mods & {"journaled.spark.sink", "journaled.spark.arrowread", "pyarrow.compute"}, method
    mods = worker_modules(q, "writer", "append")
    assert "journaled.spark.sink" in mods
    assert not mods & {"journaled.spark.source", "journaled.spark.arrowread", "pyarrow.compute"}


def test_the_package_still_offers_its_errors_and_offsets_behind():
    import journaled.spark
    from journaled.spark import DataLossError, OptionError, offsets_behind
    from journaled.spark.offsets import DataLossError as D
    from journaled.spark.offsets import OptionError as O
    from journaled.spark.offsets import offsets_behind as ob

    assert (DataLossError, OptionError, offsets_behind) == (D, O, ob)
    with pytest.raises(AttributeError):
        journaled.spark.no_such_name  # noqa: B018


def test_both_readers_hand_spark_arrow_record_batches(tmp_path):
    import pyarrow as pa
    from pyspark.sql.types import StructType

    import journaled.spark

    q = str(tmp_path / "q")
    fill(q, [b"a", b"bc", b"def"])
    schema = StructType()  # SCHEMA_DDL, as Spark parses it
    for name, kind in (("id", "long"), ("value", "binary"), ("timestamp", "timestamp")):
        schema = schema.add(name, kind)
    schema = schema.add("expire_at", "timestamp").add("queue", "string")
    src = journaled.spark.JournaledDataSource(options={"path": q, "startingOffsets": "earliest"})
    batch = src.reader(schema)
    stream = src.streamReader(schema)
    start = stream.initialOffset()
    end = stream.latestOffset(start, stream.getDefaultReadLimit())
    for reader, parts in ((batch, batch.partitions()), (stream, stream.partitions(start, end))):
        out = [b for part in parts for b in reader.read(part)]
        assert out and all(isinstance(b, pa.RecordBatch) for b in out)
        table = pa.Table.from_batches(out)
        assert table.column("value").to_pylist() == [b"a", b"bc", b"def"]
        assert table.column("id").to_pylist() == [1, 2, 3]


def test_a_range_of_several_journal_files_is_spread_over_min_partitions(tmp_path, monkeypatch):
    from pyspark.sql.types import StructType

    from journaled.spark.source import JournaledBatchReader

    q = str(tmp_path / "q")
    files = QueueConfig(journal_size=1 << 20, sync="never")
    fill(q, [b"x" * 1000] * 12_000, files)  # about 12 MiB in 12 journal files of 1 MiB

    def spans(**options):
        parts = JournaledBatchReader({"path": q, **options}, StructType().add("value", "binary")).partitions()
        return [(p.segments[0].path, len(p.segments), all(s.exact for s in p.segments)) for p in parts]

    assert len(spans(minPartitions="1")) == 1  # 12 MiB is below maxPartitionBytes (64 MiB)
    two = spans(minPartitions="2")
    assert [n for _, n, _ in two] == [6, 6]
    assert all(exact for _, _, exact in two)  # whole journal files: no record boundary to probe for
    assert len(spans(minPartitions="3")) == 3  # at least 4 MiB each, as Spark's openCostInBytes
    assert len(spans(minPartitions="50")) == 3
    monkeypatch.setattr(os, "cpu_count", lambda: 2)  # by default, one partition per local core
    assert spans() == two
    with pytest.raises(__import__("journaled.spark").spark.OptionError):
        spans(minPartitions="0")


# ---------------------------------------------------------------- filter pushdown (batch reads)


class ShiftedClock:
    """``time`` as the put path sees it, with add times moved ``offset_ns`` into the past."""

    def __init__(self):
        self.offset_ns = 0

    def __getattr__(self, name):
        return getattr(time, name)

    def time_ns(self):
        return time.time_ns() - self.offset_ns


def a_week_of_journal(path, monkeypatch, per_hour=20):
    """168 hours of items, oldest first, in journal files of 64 KiB; returns the items' ids by hour."""
    from support.clock import set_put_clock

    clock = ShiftedClock()
    set_put_clock(monkeypatch, clock)
    by_hour = []
    with journaled.JournaledQueue(path, QueueConfig(journal_size=64 << 10, sync="never")) as q:
        for hours_ago in range(168, 0, -1):
            clock.offset_ns = hours_ago * 3600 * 10**9 - 1800 * 10**9  # mid-hour
            by_hour.append(q.put_many([b"e" * 1000] * per_hour))
    monkeypatch.undo()
    return by_hour


def planned_bytes(reader):
    return sum(s.end - s.start for p in reader.partitions() for s in p.segments)


def read_ids(reader):
    return [i for p in reader.partitions() for b in reader.read(p) for i in b.column("id").to_pylist()]


def batch_reader(path, **options):
    from pyspark.sql.types import StructType

    import journaled.spark

    schema = StructType().add("id", "long").add("value", "binary").add("timestamp", "timestamp")
    schema = schema.add("expire_at", "timestamp").add("queue", "string")
    source = journaled.spark.JournaledDataSource(
        options={"path": str(path), "filterPushdown": "true", **options}
    )
    return source.reader(schema)


def test_a_pushed_time_filter_reads_only_the_last_hours_files(tmp_path, monkeypatch):
    import datetime as dt

    from pyspark.sql.datasource import GreaterThan, LessThan

    q = tmp_path / "q"
    by_hour = a_week_of_journal(str(q), monkeypatch)
    whole = planned_bytes(batch_reader(q))
    hour_ago = dt.datetime.now() - dt.timedelta(hours=1)  # naive local time, as PySpark passes it
    r = batch_reader(q)
    f = GreaterThan(("timestamp",), hour_ago)
    assert list(r.pushFilters([f])) == [f]  # Spark still applies it, to the millisecond
    assert read_ids(r) == by_hour[-1]  # every item of the last hour, and only those
    assert planned_bytes(r) <= 64 << 10 and whole > 50 * (64 << 10)  # one journal file of 53
    earlier = batch_reader(q)
    earlier.pushFilters(
        [GreaterThan(("timestamp",), hour_ago - dt.timedelta(hours=3)), LessThan(("TIMESTAMP",), hour_ago)]
    )
    assert read_ids(earlier) == [i for h in by_hour[-4:-1] for i in h]


def test_pushed_id_filters_are_applied_exactly_and_others_are_left_to_spark(tmp_path):
    from pyspark.sql.datasource import (
        EqualTo,
        GreaterThanOrEqual,
        In,
        IsNotNull,
        LessThan,
        LessThanOrEqual,
        Not,
    )

    q = tmp_path / "q"
    fill(str(q), [b"x"] * 200)
    r = batch_reader(q)
    rest = [In(("id",), (150, 120)), Not(EqualTo(("id",), 130)), IsNotNull(("value",)), EqualTo(("id",), "7")]
    ranges = [GreaterThanOrEqual(("id",), 100), LessThan(("id",), 190), LessThanOrEqual(("id",), 160)]
    assert list(r.pushFilters(ranges + rest)) == rest
    assert read_ids(r) == list(range(120, 151))  # In narrows to its smallest and largest id
    one = batch_reader(q)
    assert list(one.pushFilters([EqualTo(("id",), 42)])) == []
    assert read_ids(one) == [42]
    none = batch_reader(q)
    none.pushFilters([GreaterThanOrEqual(("id",), 150), LessThan(("id",), 100)])
    assert read_ids(none) == [] and none.partitions() == []


def test_spark_pushes_id_and_timestamp_conditions_when_filter_pushdown_is_on(spark, tmp_path, monkeypatch):
    q = str(tmp_path / "q")
    by_hour = a_week_of_journal(q, monkeypatch)
    last_hour = "timestamp > current_timestamp() - interval 1 hour"
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = spark.read.format("journaled").option("filterPushdown", "true").load(q)
        assert [r.id for r in df.where(last_hour).select("id").collect()] == by_hour[-1]
        assert [r.id for r in df.where("id >= 10 and id < 15").select("id").collect()] == [10, 11, 12, 13, 14]
        assert df.where("id in (3, 9) and value is not null").count() == 2
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    # without the setting, a read without the option works as ever (and one with it says why not)
    assert [r.id for r in spark.read.format("journaled").load(q).where(last_hour).collect()] == by_hour[-1]
    with pytest.raises(Exception, match="filterPushdown.enabled"):
        spark.read.format("journaled").option("filterPushdown", "true").load(q).where(last_hour).collect()


def test_the_default_schema_is_id_value_timestamp_key_with_queue_for_several_queues(tmp_path):
    """What a read naming no schema gets: Kafka's offset, value, timestamp and key; ``queue``
    only when the read names several queues (one queue's rows all carry the path it was given);
    ``headers`` with ``includeHeaders``; every column by naming ``ALL_COLUMNS_DDL``."""
    from journaled.spark.offsets import ALL_COLUMNS_DDL, COLUMN_TYPES, schema_ddl

    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert schema_ddl({"path": a}) == (
        "id bigint NOT NULL, value binary NOT NULL, timestamp timestamp NOT NULL, key binary"
    )
    assert schema_ddl({"paths": f"{a},{b}"}).endswith(", key binary, queue string NOT NULL")
    assert schema_ddl({"path": a, "includeHeaders": "true"}).endswith(
        ", key binary, headers array<struct<key:string,value:binary>>"
    )
    assert schema_ddl({}) == schema_ddl({"path": a})  # no path: the reader refuses it, not the schema
    assert [c.split()[0] for c in ALL_COLUMNS_DDL.split(", ")] == [c for c in COLUMN_TYPES if c != "headers"]
    # a column every item has is declared so (Spark then skips its null checks); the rest may be null
    not_null = {c.split()[0] for c in ALL_COLUMNS_DDL.split(", ") if c.endswith(" NOT NULL")}
    assert not_null == {"id", "value", "timestamp", "queue"}


def test_the_worker_answering_schema_imports_no_planning_or_reading_module(tmp_path):
    """Spark asks a worker of its own for the schema of every read that names none: it imports
    the light schema module only, not the planner and the journal readers under it."""
    code = (
        "import sys\n"
        "import journaled.spark\n"
        "src = journaled.spark.JournaledDataSource(options={'path': sys.argv[1]})\n"
        "print(src.schema())\n"
    )
    (ddl,), loaded = run_and_list_modules(code, str(tmp_path / "q"))
    assert ddl == "id bigint NOT NULL, value binary NOT NULL, timestamp timestamp NOT NULL, key binary"
    assert "journaled.spark.schema" in loaded
    assert not loaded & {"journaled.spark.offsets", "journaled.offline.segments", "journaled.log"}
