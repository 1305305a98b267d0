"""How a compressed queue's writer cuts a put_many batch into units (log/runs.py ``cut_run``, the
writer's ``_append_units``) and appends each unit (format/compressed.py ``append_unit``): the cut
takes as many items as fit the file and the cap ([F-46]), never crosses a file, and the record
appended is the PUTZ that ``encode_record`` would make."""

from __future__ import annotations

import glob
import os

from hypothesis import given, settings
from hypothesis import strategies as st
from test_compression_queue import drain, line

from journaled import JournaledQueue, QueueConfig
from journaled.format import compressed
from journaled.format.record import (
    CODEC_ZSTD,
    MAX_UNIT_RAW,
    PUT_OVERHEAD,
    TYPE_PUTZ,
    UNIT_FIELDS_STRUCT,
    Put,
    Unit,
    decode_header,
    decode_one,
    encode_record,
)
from journaled.format.speedups import encode_puts
from journaled.log.runs import cut_run, run_ends


def cut_by_the_rule(sizes: list[int], i: int, room: int, empty: bool) -> int:
    """The rule, item by item: take items while their plain records fit both the room left in
    the file and the cap; the first is taken alone when it fits the room or the file is empty."""
    j, used = i, 0
    while j < len(sizes):
        rec = PUT_OVERHEAD + sizes[j]
        if j == i:
            if rec > room and not empty:
                break
        elif used + rec > min(room, MAX_UNIT_RAW):
            break
        used += rec
        j += 1
    return j


CAP_EDGE = MAX_UNIT_RAW - PUT_OVERHEAD  # the largest payload a unit holds alone


@settings(max_examples=300, deadline=None)
@given(
    sizes=st.lists(
        st.one_of(
            st.integers(0, 300),
            st.integers(100_000, MAX_UNIT_RAW + 10),
            st.sampled_from([CAP_EDGE, CAP_EDGE + 1, MAX_UNIT_RAW]),
        ),
        min_size=1,
        max_size=40,
    ),
    data=st.data(),
    empty=st.booleans(),
)
def test_a_run_takes_every_item_that_fits_the_file_and_the_cap(sizes: list[int], data, empty: bool) -> None:
    i = data.draw(st.integers(0, len(sizes) - 1))
    # the room left in the file: anywhere, or exactly at (or one byte off) the end of an item
    edges = [
        sum(PUT_OVERHEAD + n for n in sizes[i:k]) + d
        for k in range(i + 1, len(sizes) + 1)
        for d in (-1, 0, 1)
    ]
    room = data.draw(
        st.one_of(st.integers(0, 4 * MAX_UNIT_RAW), st.integers(0, 2000), st.sampled_from(edges))
    )
    assert cut_run(run_ends(sizes), i, max(room, 0), empty) == cut_by_the_rule(sizes, i, max(room, 0), empty)


def test_a_batch_is_cut_where_the_file_or_the_cap_ends_and_reads_back_in_order(tmp_path) -> None:
    path = str(tmp_path / "q")
    size, n = 64 * 1024, 20_000
    items = [line(i) for i in range(1, n + 1)]  # 2.2 MB of plain records: over the cap, several files
    with JournaledQueue(path, QueueConfig(compression="zstd", journal_size=size), name="q") as q:
        q.reader("r")
        assert q.put_many(items) == list(range(1, n + 1))
    files = sorted(glob.glob(os.path.join(path, "q.[0-9]*")))
    assert len(files) >= 3
    next_id, units = 1, 0
    for f in files:
        data = open(f, "rb").read()
        assert len(data) <= size
        header = decode_header(data)
        pos = header.size
        while pos < len(data):
            rec = decode_one(data, pos, 0, header.salt)
            assert isinstance(rec, Unit | Put), rec
            first, count = (rec.first_id, rec.count) if isinstance(rec, Unit) else (rec.id, 1)
            assert first == next_id
            units += isinstance(rec, Unit)
            # a run takes the room of its plain records, and as many items as fit that room
            room = min(size - pos, MAX_UNIT_RAW)
            raw = sum(PUT_OVERHEAD + len(items[k - 1]) for k in range(first, first + count))
            assert raw <= room
            if first + count <= n:
                assert raw + PUT_OVERHEAD + len(items[first + count - 1]) > room
            next_id += count
            pos += rec.size
    assert next_id == n + 1 and units >= len(files)
    got, lost = drain(path)
    assert [g[:2] for g in got] == [(k, items[k - 1]) for k in range(1, n + 1)] and lost == []


def test_the_unit_appended_is_the_putz_record_encode_record_makes() -> None:
    salt, offset = 0xA5A5F00D, 4096
    inner = bytearray()
    encode_puts(
        compressed.unit_salt(salt, offset), 0, 7, 1_764_000_000_000, 0, [line(i) for i in range(50)], inner
    )
    out = bytearray(b"before")
    assert compressed.append_unit(out, salt, offset, 7, 50, inner)
    frame = out[6 + compressed.UNIT_OVERHEAD :]
    body = UNIT_FIELDS_STRUCT.pack(7, 50, CODEC_ZSTD, len(inner)) + frame
    assert bytes(out) == b"before" + encode_record(salt, offset, TYPE_PUTZ, body)
    assert compressed.encode_unit(salt, offset, 7, 50, inner) == bytes(out[6:])
    unit = decode_one(bytes(out[6:]), 0, 0, salt ^ offset)  # the CRC seeded by position
    assert isinstance(unit, Unit) and (unit.first_id, unit.count, unit.raw_len) == (7, 50, len(inner))


def test_a_unit_that_would_not_be_smaller_appends_nothing() -> None:
    inner = bytearray()
    encode_puts(compressed.unit_salt(1, 40), 0, 1, 0, 0, [os.urandom(4000) for _ in range(2)], inner)
    out = bytearray(b"x")
    assert not compressed.append_unit(out, 1, 40, 1, 2, inner) and out == b"x"


class FailingBuffer(bytearray):
    """A buffer whose ``k``-th append fails as a full memory would (after ``+=`` took nothing)."""

    def __init__(self, data: bytes, fail_at: int) -> None:
        super().__init__(data)
        self.appends, self.fail_at = 0, fail_at

    def __iadd__(self, other):  # type: ignore[no-untyped-def]
        self.appends += 1
        if self.appends == self.fail_at:
            raise MemoryError
        return super().__iadd__(other)


def test_a_unit_append_that_fails_midway_leaves_the_buffer_as_it_was() -> None:
    inner = bytearray()
    encode_puts(compressed.unit_salt(1, 40), 0, 1, 0, 0, [line(i) for i in range(50)], inner)
    for fail_at in (1, 2, 3):
        out = FailingBuffer(b"records before", fail_at)
        try:
            compressed.append_unit(out, 1, 40, 1, 50, inner)
        except MemoryError:
            pass
        # a part of a record left in the writer's buffer would be written out as damage
        assert bytes(out) in (
            b"records before",
            b"records before" + compressed.encode_unit(1, 40, 1, 50, inner),
        )
