"""Micro-batches and batch reads whose bounds fall inside a compressed unit (issue 39), without a JVM:
the Spark planner (spark/offsets.py) and both segment readers (the Arrow column reader the source
runs and the record reader) give every id exactly once across consecutive batches.

Before the fix a batch ending at an id inside a unit ended its bytes at the unit's offset: the
unit's ids below the end were read by neither that batch nor the next (1,338 of 3,000 rows through
Spark with maxRecordsPerTrigger=777 on a zstd queue)."""

from __future__ import annotations

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")

from journaled.format import compressed  # noqa: E402
from journaled.offline.segments import read_segment  # noqa: E402
from journaled.spark.arrowread import read_segment_arrays  # noqa: E402
from journaled.spark.offsets import Planner  # noqa: E402
from support.zspark_queues import KINDS, build  # noqa: E402

if not compressed.available():
    pytest.skip("no compression codec here", allow_module_level=True)


def batch_ids(planner: Planner, lo: int, hi: int) -> tuple[list[int], list[int]]:
    """Ids of the batch ``[lo, hi)`` of queue "q" as the Arrow reader and the record reader read it."""
    planned = planner.plan({"q": lo}, {"q": hi})
    arrow = [
        i for _, seg in planned for cols in read_segment_arrays(seg, rows=4) for i in cols.ids.to_pylist()
    ]
    records = [r.id for _, seg in planned for r in read_segment(seg)]
    return arrow, records


@pytest.fixture(params=KINDS)
def queue(request, tmp_path) -> tuple[str, int]:
    path = str(tmp_path / "q")
    return path, build(path, request.param)


@pytest.mark.parametrize("split", [1 << 20, 40])
def test_two_batches_cut_at_every_id_read_every_id_exactly_once(queue, split) -> None:
    path, end = queue
    planner = Planner({"q": path}, split_bytes=split)
    planner.latest()  # opens the view plan() reads
    for cut in range(1, end + 1):
        for lo, hi in ((1, cut), (cut, end)):
            arrow, records = batch_ids(planner, lo, hi)
            assert (arrow, records) == (list(range(lo, hi)),) * 2, (
                f"batch [{lo}, {hi}) of cut {cut}, split {split}"
            )


def test_micro_batches_capped_by_rows_read_every_id_exactly_once(queue) -> None:
    path, end = queue
    planner = Planner({"q": path})
    for cap in range(1, end):  # maxRecordsPerTrigger
        got, start = [], planner.earliest()
        while start["q"] < end:
            stop = planner.cap_rows(start, planner.latest(), cap)
            got += batch_ids(planner, start["q"], stop["q"])[0]
            start = stop
        assert got == list(range(1, end)), f"maxRecordsPerTrigger={cap}"


def test_micro_batches_capped_by_bytes_read_every_id_exactly_once(queue) -> None:
    path, end = queue
    planner = Planner({"q": path})
    for cap in (1, 30, 100, 333, 1000):  # maxBytesPerTrigger
        got, start, batches = [], planner.earliest(), 0
        while start["q"] < end:
            stop = planner.cap_bytes(start, planner.latest(), cap)
            assert stop["q"] > start["q"]
            got += batch_ids(planner, start["q"], stop["q"])[0]
            start, batches = stop, batches + 1
        assert got == list(range(1, end)), f"maxBytesPerTrigger={cap}"


def test_partitions_of_a_batch_read_ending_inside_a_unit_hold_every_id_once(queue) -> None:
    pytest.importorskip("pyspark", reason="the spark extra is not installed")
    from journaled.spark.source import _partitions

    path, end = queue
    planner = Planner({"q": path}, split_bytes=64, min_partitions=3)
    planner.latest()
    for lo, hi in ((1, end), (2, end - 1), (9, 10), (4, 30)):  # endingOffsets / id pushdown bounds
        parts = _partitions(planner, {"q": lo}, {"q": hi})
        got = [
            i
            for p in parts
            for seg in p.segments
            for c in read_segment_arrays(seg)
            for i in c.ids.to_pylist()
        ]
        assert got == list(range(lo, hi)), f"[{lo}, {hi}) in {len(parts)} partitions"
