"""Planning a Spark read of a compressed queue (docs/spark.md, "Planning partitions"): probing for a
record boundary inside compressed bytes reads about its window, and partitions carry equal work
(estimated inner bytes), not equal bytes on disk."""

from __future__ import annotations

import os
import random

import pytest

pytest.importorskip("pyarrow", reason="the spark extra is not installed")

import journaled  # noqa: E402
from journaled.config import QueueConfig  # noqa: E402
from journaled.format.record import PUT_OVERHEAD  # noqa: E402
from journaled.offline import segments  # noqa: E402
from journaled.offline.segments import QueueView  # noqa: E402
from journaled.spark.offsets import Planner  # noqa: E402
from journaled.spark.source import _partitions  # noqa: E402


def log_line(rnd: random.Random, i: int) -> bytes:
    """A JSON log line with a random request id: frames full of arbitrary bytes, as real ones."""
    return b'{"i":%d,"level":"%s","request_id":"%016x","latency_ms":%d,"msg":"%s"}' % (
        i, rnd.choice([b"info", b"warn"]), rnd.getrandbits(64), rnd.randrange(900),
        rnd.choice([b"ok", b"slow request", b"retry scheduled", b"cache miss"]),
    )  # fmt: skip


def fill(path: str, n: int, journal_size: int, compression: str | None = "zstd") -> None:
    rnd = random.Random(7)
    cfg = QueueConfig(journal_size=journal_size, sync="never", compression=compression)
    with journaled.JournaledQueue(path, cfg) as q:
        for k in range(0, n, 500):
            q.put_many([log_line(rnd, k + i + 1) for i in range(min(500, n - k))])


def test_probing_compressed_bytes_reads_about_its_window_not_false_records(tmp_path, monkeypatch) -> None:
    q = str(tmp_path / "q")
    fill(q, 40_000, 16 << 20)
    view = QueueView(q)
    read = []
    real = os.pread

    def counting(fd: int, n: int, off: int) -> bytes:
        got = real(fd, n, off)
        read.append(len(got))
        return got

    monkeypatch.setattr(segments.os, "pread", counting)
    assert view.tail().id == 40_001
    assert view.locate(20_000).id <= 20_000
    # a tail and a bisection: a few 64 KiB probes and the records walked after them
    assert sum(read) < 4 << 20, f"planning read {sum(read):,} bytes in {len(read)} reads"


def inner_bytes(part: object) -> int:
    """Bytes of the records a task reading ``part`` decodes (inner records of units included)."""
    return sum(PUT_OVERHEAD + len(r.payload) for seg in part.segments for r in segments.read_segment(seg))  # type: ignore[attr-defined]


def test_partitions_of_a_compressed_queue_carry_equal_work(tmp_path) -> None:
    q = str(tmp_path / "q")
    fill(q, 60_000, 1 << 20)  # 3 files of 1 MiB or less on disk, each holding several MiB of records
    planner = Planner({"q": q}, split_bytes=1 << 20, min_partitions=2)
    parts = _partitions(planner, planner.earliest(), planner.latest())
    work = [inner_bytes(part) for part in parts]
    assert sum(sum(1 for seg in p.segments for _ in segments.read_segment(seg)) for p in parts) == 60_000  # type: ignore[attr-defined]
    # maxPartitionBytes counts the records decoded, not the bytes on disk (a unit's items are
    # read together, so a piece may pass it by up to one unit: 500 items here, ~60 KB)
    assert len(parts) >= 2 and max(work) <= (1 << 20) * 1.2, f"record bytes per partition {work}"


def test_a_plain_queue_is_still_packed_by_its_bytes(tmp_path) -> None:
    q = str(tmp_path / "q")
    fill(q, 30_000, 1 << 20, compression=None)
    planner = Planner({"q": q}, min_partitions=2)
    parts = _partitions(planner, planner.earliest(), planner.latest())
    view = QueueView(q)
    # whole files, grouped: no file is cut below maxPartitionBytes
    assert all(seg.exact for part in parts for seg in part.segments)  # type: ignore[attr-defined]
    assert sum(len(part.segments) for part in parts) == len(view.files)  # type: ignore[attr-defined]


def test_a_segment_made_without_an_estimate_weighs_its_bytes() -> None:
    seg = segments.Segment("q.1", 0, 1, 100, 4196, 1, 50, True)
    assert seg.work == 4096
