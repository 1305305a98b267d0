"""Edges of rotation and archiving: an explicit sync still covers files already rotated away
from (sync="never"), and a cursor at the end of, or inside, an archived file reads on in the
next file."""

from __future__ import annotations

from journaled import JournaledQueue, QueueConfig


def test_sync_never_explicit_sync_still_covers_retired_files(qdir):
    cfg = QueueConfig(sync="never", journal_size=256, checkpoint_interval=3600.0)
    with JournaledQueue(qdir, cfg) as q:
        for i in range(5):
            q.put(b"%03d" % i + b"x" * 97)
        q.sync()  # must not fail now that retired files are synced by path
    with JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        assert [int(r.get(block=False).data[:3]) for _ in range(5)] == list(range(5))


def test_reading_from_the_end_of_an_archived_file_continues_in_the_next_file(tmp_path):
    from journaled.config import QueueConfig
    from journaled.log.journal import Cursor, Journal, now_ms

    j = Journal(str(tmp_path), "q", QueueConfig(journal_size=512, sync="never"))
    try:
        for k in range(30):
            j.append([b"%03d" % k + b"x" * 60], now_ms(), 0)
        assert len(j.files) >= 3
        first, second = j.files[0], j.files[1]
        # a reader whose last refill stopped exactly at the end of the first file...
        at_end = Cursor(first.ms, first.size, second.first_id)
        # ...and that file is then archived because every reader committed past it
        j.archive([first], None)
        recs, _ = j.read(at_end, max_items=3)
        assert [r.id for r in recs] == [second.first_id, second.first_id + 1, second.first_id + 2]
        # a cursor into an archived file but beyond the oldest remaining file's first id is
        # found again by id instead of failing
        third = j.files[1]
        j.archive([second], None)
        beyond = Cursor(second.ms, second.size, third.first_id + 1)
        recs, _ = j.read(beyond, max_items=1)
        assert [r.id for r in recs] == [third.first_id + 1]
    finally:
        j.close()
