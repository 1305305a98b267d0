"""A valid record of a type this version must understand and does not (docs/format.md [F-11]).

Written by a newer journaled, it changes the meaning of what follows, so a reader must not skip it:
every item before it is delivered, then the reader stops there with ``UnsupportedVersion`` naming
the file and offset, and ``stats()``/health say why (issue 34, point 6).  Before, the read-ahead
that reached the record raised from every ``get`` -- 0 to 2 of 1,640 items were delivered, the
error named ``<journal>`` and health stayed ok.  A skippable type (0x80-0xFF) is skipped.
"""

from __future__ import annotations

import os

import pytest

import journaled
from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, UnsupportedVersion
from journaled.format.record import decode_header, encode_record
from journaled.offline.scan import JournalScanner

ITEMS = 1640


def journal_files(path: str) -> list[str]:
    names = sorted(f for f in os.listdir(path) if f.startswith("q.") and f[2:].isdigit())
    return [os.path.join(path, f) for f in names]


def queue_with_a_record_at_the_end_of_file_1(path: str, rtype: int) -> tuple[int, str, int]:
    """A queue of ITEMS items over many files, the second file ending with a valid record of
    ``rtype``; returns the last id before it, that file and the record's offset."""
    with JournaledQueue(path, QueueConfig(journal_size=16384, sync="never")) as q:
        q.put_many([b"%04d" % i + b"x" * 96 for i in range(ITEMS)])
    files = journal_files(path)
    assert len(files) > 4
    raw = open(files[1], "rb").read()
    with open(files[1], "ab") as f:
        f.write(encode_record(decode_header(raw[:512]).salt, len(raw), rtype, b"from a newer writer"))
    last_before = decode_header(open(files[2], "rb").read(512)).first_id - 1
    return last_before, files[1], len(raw)


def drain(reader, got: list[int] | None = None) -> list[int]:
    """Take and commit until Empty, appending the ids to ``got`` (kept if it raises)."""
    got = [] if got is None else got
    while True:
        try:
            item = reader.get(block=False)
        except Empty:
            return got
        got.append(item.id)
        reader.commit(item)


@pytest.mark.parametrize("max_memory", [None, 1000, 64 << 10])
def test_a_reader_delivers_every_item_before_a_newer_record_then_stops_with_unsupported_version(
    tmp_path, max_memory
):
    path = str(tmp_path / "q")
    last_before, victim, offset = queue_with_a_record_at_the_end_of_file_1(path, 0x7F)
    with JournaledQueue(path, QueueConfig(sync="never")) as q:
        config = ReaderConfig(start="earliest")
        if max_memory is not None:
            config = ReaderConfig(start="earliest", max_memory=max_memory)
        reader = q.reader("r", config)
        got = []
        with pytest.raises(UnsupportedVersion) as raised:
            drain(reader, got)
        assert got == list(range(1, last_before + 1))
        assert (raised.value.path, raised.value.offset) == (victim, offset)
        with pytest.raises(UnsupportedVersion):  # it stays stopped there
            reader.get(timeout=0.1)
        stats = q.stats()
        [rs] = stats.readers
        assert rs.stopped is not None and "record type 127" in rs.stopped and victim in rs.stopped
        assert not stats.health.ok and stats.health.stopped_readers == ("r",)


def test_the_scanner_yields_every_record_before_a_newer_record_then_raises(tmp_path):
    path = str(tmp_path / "q")
    last_before, victim, offset = queue_with_a_record_at_the_end_of_file_1(path, 0x7F)
    seen = []
    with pytest.raises(UnsupportedVersion) as raised:
        for rec in JournalScanner(path).records():
            seen.append(rec.id)
    assert seen == list(range(1, last_before + 1))
    assert (raised.value.path, raised.value.offset) == (victim, offset)


def test_a_skippable_record_type_is_skipped_and_every_item_delivered(tmp_path):
    path = str(tmp_path / "q")
    queue_with_a_record_at_the_end_of_file_1(path, 0x85)
    with JournaledQueue(path, QueueConfig(sync="never")) as q:
        assert drain(q.reader("r", ReaderConfig(start="earliest"))) == list(range(1, ITEMS + 1))
        assert q.stats().health.ok
    assert journaled.UnsupportedVersion is UnsupportedVersion
