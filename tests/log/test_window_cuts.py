"""Where a read window ends changes nothing: every reader of journal bytes, cut anywhere, yields
exactly the records of one whole walk (issue 34, point 1; docs/format.md [F-16]).

A window that ends inside a record means "read more"; only the end of a file can hold a torn or
zero-filled tail.  The journals here are made of records whose CRC starts with zero bytes (one
record in 256 does in real life), so that a window ending 1 to 8 bytes into a record shows only
zeros: before the fix, every reader took them for a zero-filled tail and skipped the record as
damage.  Checked for the record walker itself (a read cut at every byte offset, every window size),
the owner's read-behind, the read-only scanner (``journaled dump``, ``check``), Spark's segment reader and its
Arrow column path -- each run compiled and pure, as the whole suite is.
"""

from __future__ import annotations

import shutil

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import journaled
from journaled.config import QueueConfig, ReaderConfig
from journaled.format.record import RECORD_HEADER_SIZE, FileHeader
from journaled.log.walker import FileWalker, Span
from journaled.offline.scan import JournalScanner
from journaled.offline.segments import QueueView, read_segment
from tests.support import zerocrc


def walk(data: bytes, header: FileHeader, pread=None, **kw) -> tuple[list[int], list[Span]]:
    """Ids of every record a walk yields, and the spans it reported."""
    spans: list[Span] = []

    def keep(span: Span, rest: bytes) -> bool:
        spans.append(span)
        return True

    walker = FileWalker(
        pread or (lambda n, off: data[off : off + n]),
        header.salt,
        header.size,
        len(data),
        header.first_id,
        keep,
        **kw,
    )
    return [rec.id for batch in walker for rec in batch], spans


def cut_at(data: bytes, cut: int):
    """A ``pread`` whose first read that spans ``cut`` stops there: a window ending at ``cut``
    (the reads after it are whole, as a file's are)."""
    pending = [cut]

    def pread(n: int, off: int) -> bytes:
        end = off + n
        if pending and off < cut < end:
            end = pending.pop()
        return data[off:end]

    return pread


def test_a_window_ending_one_byte_into_a_zero_led_record_reads_on():
    data, header = zerocrc.image(3, seed=1)
    second = header.size + len(zerocrc.records(zerocrc.SALT, header.size, 1, 1, 1)[0])
    assert data[second] == 0  # the second record starts with a zero byte
    ids, spans = walk(data, header, pread=cut_at(data, second + 1))
    assert (ids, spans) == ([1, 2, 3], [])


@settings(max_examples=12, deadline=None)
@given(count=st.integers(1, 40), seed=st.integers(0, 2**32 - 1))
def test_a_read_cut_at_every_byte_offset_yields_the_records_of_one_whole_walk(count, seed):
    data, header = zerocrc.image(count, seed)
    whole, spans = walk(data, header)
    assert whole == list(range(1, count + 1)) and spans == []
    for cut in range(header.size + 1, len(data)):
        ids, spans = walk(data, header, pread=cut_at(data, cut))
        assert (ids, spans) == (whole, []), f"window cut at offset {cut}"


@settings(max_examples=4, deadline=None)
@given(count=st.integers(20, 80), seed=st.integers(0, 2**32 - 1))
def test_every_window_size_and_payload_budget_yields_the_records_of_one_whole_walk(count, seed):
    data, header = zerocrc.image(count, seed)
    whole = list(range(1, count + 1))
    for chunk in range(0, len(data) - 4096 + RECORD_HEADER_SIZE):
        # the walker reads chunk + 4 KiB at a time: these cut the first window at every offset
        assert walk(data, header, chunk=chunk) == (whole, []), f"chunk {chunk}"
    for budget in (1, 7, 50, 200, 1000):
        walker = FileWalker(lambda n, off: data[off : off + n], header.salt, header.size, len(data), 1)
        ids = []
        while batch := walker.read_batch(max_bytes=budget):
            ids += [rec.id for rec in batch]
        assert ids == whole, f"payload budget {budget}"


# --------------------------------------------------------------------------- whole queue dirs
# Three journal files of zero-led records, every one SIZE bytes long: a read of 4 KiB plus a
# budget ends at (budget + 4096) % SIZE bytes into a record, so among SIZE consecutive budgets one
# ends every window exactly 1 byte into a record (and others 2 to 8 bytes in).
COUNTS = [400, 300]
SIZE = 80


@pytest.fixture(scope="module")
def queue_dir(tmp_path_factory) -> tuple[str, list[int]]:
    path = str(tmp_path_factory.mktemp("zero-led") / "q")
    return path, zerocrc.write_queue(path, COUNTS, seed=34, size=SIZE)


def test_the_scanner_sees_every_record_whatever_its_window(queue_dir):
    path, ids = queue_dir
    for window in [*range(SIZE), 1 << 20]:
        scanner = JournalScanner(path, window=window)
        assert [rec.id for rec in scanner.records()] == ids, f"window {window}"
        assert scanner.damage == []


def test_the_spark_segment_reader_sees_every_record_whatever_its_reads(queue_dir):
    path, ids = queue_dir
    view = QueueView(path)
    segments = view.plan(view.locate(view.first_id()), view.tail(), 1000)
    for chunk in [*range(SIZE), 1 << 20]:
        gaps: list = []
        got = [rec.id for seg in segments for rec in read_segment(seg, gaps, chunk=chunk)]
        assert (got, gaps) == (ids, []), f"chunk {chunk}"


def test_the_spark_column_reader_sees_every_record_whatever_its_reads(queue_dir):
    pytest.importorskip("pyarrow")
    from journaled.spark.arrowread import read_segment_arrays

    path, ids = queue_dir
    view = QueueView(path)
    segments = view.plan(view.locate(view.first_id()), view.tail(), 1000)
    for chunk in [*range(SIZE, 2 * SIZE), 4096, 4 << 20]:
        gaps: list = []
        got = [
            i
            for seg in segments
            for batch in read_segment_arrays(seg, gaps, rows=50, chunk=chunk)
            for i in batch.ids.to_pylist()
        ]
        assert (got, gaps) == (ids, []), f"chunk {chunk}"


def test_the_owner_reading_behind_delivers_every_zero_led_record(queue_dir, tmp_path):
    # read-behind reads a window of its payload budget plus 4 KiB, stopping early at the item cap
    # its budget allows: with 80-byte records, budgets of tens of KiB end windows inside records
    # (before the fix, max_memory 42,508, 44,494, 44,825, 46,811 and 50,783 each lost 1-2 items)
    for max_memory in range(41_846, 51_000, 331):
        path = str(tmp_path / f"q{max_memory}")
        shutil.copytree(queue_dir[0], path)  # the owner may cut or archive: each run its own copy
        with journaled.JournaledQueue(path, QueueConfig(sync="never")) as q:
            reader = q.reader("behind", ReaderConfig(start="earliest", max_memory=max_memory))
            got = []
            while True:
                try:
                    item = reader.get(block=False)
                except journaled.Empty:
                    break
                got.append(item.id)
                reader.commit(item)
            assert (got, q.recovery_report) == (queue_dir[1], []), f"max_memory {max_memory}"
