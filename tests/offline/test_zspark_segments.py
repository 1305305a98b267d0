"""Reads that start or end inside a compressed unit (issue 39): every id exactly once.

A compressed unit (PUTZ, docs/format.md 4.5) holds several ids at one byte offset, so an id range
whose end falls inside a unit must take the unit's bytes and filter its ids; ending the byte range
at the unit's offset dropped the unit's ids below the end while the next range starts at the end.
"""

from __future__ import annotations

import pytest

from journaled.format import compressed
from journaled.offline.segments import Position, QueueView, read_segment
from support.zspark_queues import KINDS, all_records, build

if not compressed.available():
    pytest.skip("no compression codec here", allow_module_level=True)


def read_ids(view: QueueView, lo: int, hi: int, split: int) -> list[int]:
    """Ids the record reader gives for ``[lo, hi)``, planned as the Spark planner plans it
    (:meth:`QueueView.locate` for the start, :meth:`QueueView.locate_end` for the end)."""
    a, b = view.locate(lo), view.locate_end(hi)
    segs = view.plan(Position(a.file, a.offset, lo), Position(b.file, b.offset, hi), split)
    return [r.id for seg in segs for r in read_segment(seg)]


@pytest.fixture(params=KINDS)
def queue(request, tmp_path) -> tuple[str, int]:
    path = str(tmp_path / "q")
    return path, build(path, request.param)


def test_a_queue_of_several_files_and_units_is_what_these_tests_read(queue) -> None:
    path, end = queue
    view = QueueView(path)
    assert len(view.files) >= 2 and view.tail().id == end


def test_record_at_gives_the_record_of_each_id_also_inside_a_unit(queue) -> None:
    path, end = queue
    view = QueueView(path)
    got = [(i, rec.id if (rec := view.record_at(i)) is not None else None) for i in range(1, end)]
    assert [g for g in got if g[0] != g[1]] == []
    assert view.record_at(end) is None


def test_locate_end_is_past_every_record_holding_an_id_below_it(queue) -> None:
    path, end = queue
    view = QueueView(path)
    records = all_records(view)
    assert [r[2] for r in records] == list(range(1, end))
    for hi in range(1, end + 1):
        b = view.locate_end(hi)
        assert [r for r in records if r[2] < hi and r[:2] >= (b.file, b.offset)] == [], (
            f"locate_end({hi}) = {b}"
        )
        # and no further than the first record holding only ids from hi on
        assert [
            r
            for r in records
            if r[2] >= hi
            and r[:2] < (b.file, b.offset)
            and all(s[2] >= hi for s in records if s[:2] == r[:2])
        ] == [], f"locate_end({hi}) = {b}"


def test_consecutive_batches_cut_at_every_id_read_every_id_exactly_once(queue) -> None:
    path, end = queue
    view = QueueView(path)
    for split in (1 << 20, 40):  # whole files, and pieces cut anywhere inside them (probed)
        for cut in range(1, end + 1):
            first, second = read_ids(view, 1, cut, split), read_ids(view, cut, end, split)
            assert (first, second) == (list(range(1, cut)), list(range(cut, end))), (
                f"cut at {cut}, split {split}"
            )


def test_batches_of_every_size_read_every_id_exactly_once(queue) -> None:
    path, end = queue
    view = QueueView(path)
    for size in range(1, end):
        got = [i for lo in range(1, end, size) for i in read_ids(view, lo, min(lo + size, end), 1 << 20)]
        assert got == list(range(1, end)), (
            f"batches of {size}: missing {sorted(set(range(1, end)) - set(got))}"
        )
