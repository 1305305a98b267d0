"""The sink's parts: framed from Arrow columns, published as the tasks wrote them, once."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("pyspark", reason="the spark extra is not installed")
pa = pytest.importorskip("pyarrow", reason="the spark extra is not installed")

import journaled  # noqa: E402
from journaled.disk import spoolfiles  # noqa: E402
from journaled.offline.scan import JournalScanner  # noqa: E402
from journaled.owner import adoption  # noqa: E402
from journaled.spark import sink  # noqa: E402
from journaled.spark.offsets import OptionError  # noqa: E402


def delivered(path):
    with journaled.JournaledQueue(path):
        pass
    return [r.payload for r in JournalScanner(path).records()]


def staging(path):
    return os.path.join(adoption.spool_dir(path), adoption.STAGING)


def spooled_keys(path):
    return [adoption.read_batch_key(p) for p in adoption.pending_batches(path)]


def test_arrow_columns_are_framed_into_the_records_one_add_per_row_would_write(tmp_path):
    q = str(tmp_path / "q")
    values = [b"", b"a", "é".encode(), b"x" * 1000]
    sliced = pa.array([b"skip"] + values + [b"skip"]).slice(1, len(values))  # offset 1
    batches = [
        pa.record_batch({"value": sliced}),
        pa.record_batch({"value": pa.array(["s", ""])}),
        pa.record_batch({"value": pa.array(["l"], pa.large_string())}),
        pa.record_batch({"value": pa.array([b"L"], pa.large_binary())}),
        pa.record_batch({"value": pa.array([], pa.binary())}),
    ]
    framed = sink.stage_columns(q, batches, "k")
    by_row = sink.stage(q, sink.payloads(batches), False, "k")
    assert framed.rows == by_row.rows == 8
    with open(framed.path, "rb") as a, open(by_row.path, "rb") as b:
        assert a.read() == b.read()
    assert adoption.read_batch(framed.path)[1] == [(p, 0, None) for p in values + [b"s", b"", b"l", b"L"]]
    with pytest.raises(OptionError, match="null"):
        sink.stage_columns(q, [pa.record_batch({"value": pa.array([b"x", None])})], "k")
    assert sorted(os.listdir(staging(q))) == sorted(os.path.basename(p) for p in (framed.path, by_row.path))


def test_parts_keyed_by_their_tasks_are_renamed_into_the_spool_not_copied(tmp_path):
    q = str(tmp_path / "q")
    one = pa.record_batch({"value": pa.array([b"a", b"b"])})
    parts = [sink.stage_columns(q, [one], f"s:7:{i}") for i in range(3)]
    inodes = [os.stat(p.path).st_ino for p in parts]
    assert sink.publish(q, parts, "s:7")
    assert spooled_keys(q) == ["s:7:0", "s:7:1", "s:7:2"]
    assert [os.stat(p).st_ino for p in adoption.pending_batches(q)] == inodes
    assert os.listdir(staging(q)) == []
    assert delivered(q) == [b"a", b"b"] * 3


def test_parts_with_other_keys_are_rekeyed_and_empty_parts_after_the_first_not_published(tmp_path):
    q = str(tmp_path / "q")
    rows = pa.record_batch({"value": pa.array([b"r"])})
    empty = pa.record_batch({"value": pa.array([], pa.binary())})
    parts = [
        sink.stage_columns(q, [empty]),  # a placeholder key, written outside a Spark task
        sink.stage_columns(q, [empty], "s:3:1"),
        sink.stage_columns(q, [rows], "other:3:2"),
    ]
    assert sink.publish(q, parts, "s:3")
    assert spooled_keys(q) == ["s:3:0", "s:3:2"]
    assert os.listdir(staging(q)) == []
    assert delivered(q) == [b"r"]


def test_a_publication_cut_short_is_finished_by_the_replay_and_the_replay_is_dropped(tmp_path, monkeypatch):
    q = str(tmp_path / "q")
    original = [
        sink.stage_columns(q, [pa.record_batch({"value": pa.array([b"o%d" % i])})], f"s:5:{i}")
        for i in range(3)
    ]
    renamed = []
    real_publish = adoption.publish

    def dies_after_one(path, queue_dir):
        if renamed:
            raise OSError("killed between two renames")
        renamed.append(path)
        return real_publish(path, queue_dir)

    monkeypatch.setattr(adoption, "publish", dies_after_one)
    with pytest.raises(OSError, match="killed"):
        sink.publish(q, original, "s:5")
    monkeypatch.setattr(adoption, "publish", real_publish)
    assert delivered(q) == [b"o0"]  # the owner adopted the first part meanwhile
    # the replay's rows differ (another partitioning): only the original parts are delivered
    replay = [sink.stage_columns(q, [pa.record_batch({"value": pa.array([b"r0", b"r1"])})], "s:5:0")]
    assert not sink.publish(q, replay, "s:5")
    assert os.listdir(staging(q)) == []
    assert delivered(q) == [b"o0", b"o1", b"o2"]
    assert not sink.publish(
        q, [sink.stage_columns(q, [pa.record_batch({"value": pa.array([b"x"])})], "s:5:0")], "s:5"
    )
    assert delivered(q) == [b"o0", b"o1", b"o2"]
    assert os.listdir(staging(q)) == []


def test_a_batch_published_whole_under_the_earlier_single_key_is_not_published_again(tmp_path):
    q = str(tmp_path / "q")
    spoolfiles.spool_put(q, [b"whole"], key="s:9")
    assert delivered(q) == [b"whole"]
    assert not sink.publish(
        q, [sink.stage_columns(q, [pa.record_batch({"value": pa.array([b"w"])})], "s:9:0")], "s:9"
    )
    assert delivered(q) == [b"whole"]
    assert os.listdir(staging(q)) == []


def test_abort_after_a_commit_cut_short_delivers_the_whole_batch_once(tmp_path, monkeypatch):
    from pyspark.sql.types import BinaryType, StructField, StructType

    q = str(tmp_path / "q")
    writer = sink.JournaledStreamWriter(
        {"path": q, "sinkId": "s"}, StructType([StructField("value", BinaryType())]), False
    )
    parts = [writer.write(iter([pa.record_batch({"value": pa.array([b"p%d" % i])})])) for i in range(3)]
    real_publish = adoption.publish
    calls = []

    def fails_on_the_second(path, queue_dir):
        calls.append(path)
        if len(calls) == 2:
            raise OSError("no space left")
        return real_publish(path, queue_dir)

    monkeypatch.setattr(adoption, "publish", fails_on_the_second)
    with pytest.raises(OSError, match="space"):
        writer.commit(parts, 4)
    monkeypatch.setattr(adoption, "publish", real_publish)
    writer.abort(parts, 4)  # what Spark does when commit raises
    assert delivered(q) == [b"p0", b"p1", b"p2"]
    assert os.listdir(staging(q)) == []
    writer.commit([writer.write(iter([pa.record_batch({"value": pa.array([b"again"])})]))], 4)
    assert delivered(q) == [b"p0", b"p1", b"p2"]
    assert os.listdir(staging(q)) == []


def test_the_worker_building_the_writer_imports_no_journal_or_spool_module(tmp_path):
    """Spark builds a write's writer in a Python worker of its own, and commits it in another:
    the writer is built from the light schema module, without the planner, the journal readers
    or the spool modules (a task or the commit imports those when it stages or publishes)."""
    from support.imports import run_and_list_modules

    code = (
        "import sys\n"
        "from pyspark.sql.types import StructType, StringType\n"
        "import journaled.spark\n"
        "src = journaled.spark.JournaledDataSource(options={'path': sys.argv[1]})\n"
        "src.writer(StructType().add('value', StringType()), False)\n"
    )
    _, loaded = run_and_list_modules(code, str(tmp_path / "q"))
    assert "journaled.spark.sink" in loaded
    heavy = {
        "journaled.spark.offsets",
        "journaled.offline.segments",
        "journaled.owner.adoption",
        "journaled.disk.spoolfiles",
        "journaled.disk.intents",
    }
    assert not loaded & heavy, sorted(loaded & heavy)


def test_a_staged_part_is_flushed_to_disk_while_later_batches_still_arrive(tmp_path):
    """The fsync that makes a part durable would otherwise write all of it at the end of the
    task, while nothing else happens: past ``sink.EARLY_FLUSH_BYTES`` written, the part's bytes
    go to disk in the background as the next batches arrive; the part is whole and the same."""
    from journaled.disk import fileio

    q = str(tmp_path / "q")
    events: list[str] = []

    class Recording(fileio.FileOps):
        def fdatasync(self, fd: int) -> None:
            events.append("sync")
            super().fdatasync(fd)

    row = b"r" * 1000
    per_batch = 1000  # 1 MB a batch
    batches_needed = sink.EARLY_FLUSH_BYTES // (per_batch * len(row)) + 3

    def batches():
        for k in range(batches_needed):
            events.append(f"batch {k}")
            yield pa.record_batch({"value": pa.array([row] * per_batch, pa.binary())})

    with fileio.use(Recording()):
        part = sink.stage_columns(q, batches(), "k:0")
    assert part.rows == batches_needed * per_batch
    assert "sync" in events and events.index("sync") < events.index(f"batch {batches_needed - 1}"), events
    sink.publish(q, [part], "k")
    assert delivered(q) == [row] * part.rows
