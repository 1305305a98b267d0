"""Small queues whose compressed units hold several ids at one offset, for the tests of reads that
start or end inside a unit (issue 39: tests/offline/test_zspark_segments.py,
tests/spark/test_zspark_batches.py)."""

from __future__ import annotations

import os

import journaled
from journaled.config import QueueConfig
from journaled.offline.segments import QueueView, iter_records

KINDS = ("plain", "compressed", "mixed")

#: Batches written by one put_many each (a compressed queue stores each as one unit), and single puts.
BATCHES = [7, 1, 12, 5, 9, 3, 11, 6]


def build(path: str, kind: str) -> int:
    """A queue of ``kind`` plain, compressed or mixed (compression switched on and off between
    batches), over several journal files; returns the next id."""
    codecs = {"plain": ["none"], "compressed": ["zstd"], "mixed": ["zstd", "none"]}[kind]
    n = 0
    for i, count in enumerate(BATCHES):
        cfg = QueueConfig(journal_size=1024, sync="never", compression=codecs[i % len(codecs)])
        with journaled.JournaledQueue(path, cfg) as q:
            q.put_many([b"item %d of batch %d" % (n + j + 1, i) for j in range(count)])
            if i % 3 == 2:
                q.put(b"single after batch %d" % i)
                n += 1
        n += count
    records = all_records(QueueView(path))
    in_units = len(records) - len({r[:2] for r in records})  # items sharing their unit's offset
    assert (in_units > 0) == (kind != "plain"), f"{kind}: {in_units} ids inside units"
    assert len({r[0] for r in records}) >= 2, f"{kind}: one journal file only"
    return n + 1


def all_records(view: QueueView) -> list[tuple[int, int, int]]:
    """(file index, offset, id) of every item, read file by file without planning."""
    out = []
    for k, f in enumerate(view.files):
        fd = os.open(f.path, os.O_RDONLY)
        try:
            out += [(k, r.offset, r.id) for r in iter_records(fd, f.header.salt, f.header.size, f.size, 1)]
        finally:
            os.close(fd)
    return out
