"""Planning and reading id ranges of a queue directory by byte ranges (no Spark needed)."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import journaled
from journaled.config import QueueConfig
from journaled.format.record import encode_put
from journaled.offline.scan import JournalScanner
from journaled.offline.segments import Gap, Position, QueueView, read_segment
from support.segment_columns import read_segment_columns


def read_all(
    view: QueueView, lo: Position, hi: Position, split: int, gaps: list[Gap] | None = None
) -> list[int]:
    out = []
    for seg in view.plan(lo, hi, split):
        for ids, _, _, _ in read_segment_columns(seg, gaps, rows=7):
            out.extend(ids)
    return out


def make_queue(path: str, payloads: list[bytes], journal_size: int = 2048) -> None:
    with journaled.JournaledQueue(path, QueueConfig(journal_size=journal_size, sync="never")) as q:
        for k in range(0, len(payloads), 5):
            q.put_many(payloads[k : k + 5])


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sizes=st.lists(st.integers(0, 700), min_size=1, max_size=60),
    split=st.integers(40, 3000),
    lo_frac=st.floats(0, 1),
    hi_frac=st.floats(0, 1),
)
def test_byte_range_partitions_cover_an_id_range_exactly_once(
    tmp_path_factory, sizes, split, lo_frac, hi_frac
):
    path = str(tmp_path_factory.mktemp("q"))
    # payloads that contain valid-looking records (for another offset) must not fool probing
    fake = encode_put(0, 0, 1, 0, 0, b"decoy")
    payloads = [(fake * (1 + s // len(fake)))[:s] for s in sizes]
    make_queue(path, payloads)
    view = QueueView(path)
    tail = view.tail()
    assert tail.id == len(sizes) + 1
    lo_id = 1 + int(lo_frac * len(sizes))
    hi_id = max(lo_id, 1 + int(hi_frac * len(sizes)))
    got = read_all(view, view.locate(lo_id), view.locate(hi_id) if hi_id < tail.id else tail, split)
    got = [i for i in got if lo_id <= i < hi_id] if got else got
    assert got == list(range(lo_id, hi_id))


def test_locate_and_time_lookup_agree_with_a_full_scan(tmp_path):
    path = str(tmp_path / "q")
    make_queue(path, [b"p" * (i % 90) for i in range(300)])
    view = QueueView(path)
    records = {r.id: r for r in JournalScanner(path).records()}
    for item_id in (1, 2, 77, 150, 299, 300):
        pos = view.locate(item_id)
        assert (pos.id, view.files[pos.file].path, pos.offset) == (
            item_id,
            view.files[pos.file].path,
            records[item_id].offset,
        )
    assert view.locate(10_000).id == 301 == view.tail().id
    some = records[123]
    assert view.locate_time(some.add_ms) <= 123


def test_segment_ids_outside_the_planned_range_are_not_delivered(tmp_path):
    path = str(tmp_path / "q")
    make_queue(path, [b"x%d" % i for i in range(50)], journal_size=1 << 20)
    view = QueueView(path)
    (seg,) = view.plan(view.locate(10), view.locate(20), 1 << 20)
    assert [r.id for r in read_segment(seg)] == list(range(10, 20))


def test_damage_inside_a_range_is_reported_as_a_gap(tmp_path):
    path = str(tmp_path / "q")
    make_queue(path, [b"y" * 50 for _ in range(40)], journal_size=1 << 20)
    view = QueueView(path)
    victim = view.locate(15)
    f = view.files[victim.file]
    with open(f.path, "r+b") as fh:
        fh.seek(victim.offset + 40)
        fh.write(b"\xff\xff")
    gaps: list[Gap] = []
    got = read_all(view, view.locate(1), view.tail(), 1 << 20, gaps)
    assert 15 not in got and got == [i for i in range(1, 41) if i != 15]
    assert [(g.lo, g.hi) for g in gaps] == [(15, 16)]


def test_an_incomplete_record_at_the_tail_is_not_yet_there(tmp_path):
    path = str(tmp_path / "q")
    make_queue(path, [b"z" * 30 for _ in range(10)], journal_size=1 << 20)
    view = QueueView(path)
    f = view.files[-1]
    with open(f.path, "ab") as fh:  # half a record, as a writer in flight leaves it
        fh.write(encode_put(f.header.salt, os.path.getsize(f.path), 11, 0, 0, b"z" * 30)[:20])
    view.refresh()
    assert view.tail().id == 11
    assert read_all(view, view.locate(1), view.tail(), 64) == list(range(1, 11))


def test_damage_at_a_partition_boundary_is_reported_whatever_the_split(tmp_path):
    path = str(tmp_path / "q")
    make_queue(path, [b"w" * 60 for _ in range(30)], journal_size=1 << 20)
    view = QueueView(path)
    victim = view.locate(15)
    with open(view.files[victim.file].path, "r+b") as fh:
        fh.seek(victim.offset + 50)
        fh.write(b"\x00\xff")
    for split in range(50, 400, 7):
        gaps: list[Gap] = []
        got = read_all(view, view.locate(1), view.tail(), split, gaps)
        assert got == [i for i in range(1, 31) if i != 15], split
        assert any(g.lo <= 15 < g.hi for g in gaps), split
