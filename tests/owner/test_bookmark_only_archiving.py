"""A queue read only through external bookmarks (a Spark query; disk/bookmarks.py) archives what
every bookmark has passed (issue 22, point 3); with no reader and no bookmark everything is kept
for the first reader, as before."""

from __future__ import annotations

import logging
import re

from journaled import JournaledQueue, QueueConfig
from journaled.disk.bookmarks import remove_bookmark, write_bookmark

PAYLOAD = b"b" * 40


def open_q(path: str, **kw: object) -> JournaledQueue:
    cfg = QueueConfig(sync="never", journal_size=400, checkpoint_interval=3600.0, **kw)  # type: ignore[arg-type]
    return JournaledQueue(path, cfg, name="q")


def holder_of(q: JournaledQueue, item_id: int) -> int:
    """The first id of the journal file holding ``item_id``."""
    return max(jf.first_id for jf in q.journal.files if jf.first_id <= item_id)


def test_a_bookmarks_only_queue_archives_what_every_bookmark_passed(tmpfs_qdir) -> None:
    with open_q(tmpfs_qdir) as q:
        for _ in range(100):
            q.put(PAYLOAD)
        q.archive()
        assert q.journal.files[0].first_id == 1  # no reader, no bookmark: all kept
        at30, at60 = holder_of(q, 30), holder_of(q, 60)
        assert 1 < at30 < at60
        write_bookmark(tmpfs_qdir, "spark-a", 30)
        write_bookmark(tmpfs_qdir, "spark-b", 60)
        q.archive()
        assert q.journal.files[0].first_id == at30  # the lower bookmark holds
        remove_bookmark(tmpfs_qdir, "spark-a")
        q.archive()
        assert q.journal.files[0].first_id == at60
        assert q.stats().readers == ()


def test_the_background_pass_follows_a_moving_bookmark(tmpfs_qdir) -> None:
    """Bookmarks move without telling the owner: each pass looks again."""
    with open_q(tmpfs_qdir) as q:
        for _ in range(100):
            q.put(PAYLOAD)
        write_bookmark(tmpfs_qdir, "spark", 20)
        q.archive()
        first = q.journal.files[0].first_id
        write_bookmark(tmpfs_qdir, "spark", 90)
        assert q._files.archive_wanted  # the next background pass archives again
        q.archive()
        assert q.journal.files[0].first_id > first


def test_retention_passes_a_bookmark_behind_with_a_warning(tmpfs_qdir, caplog) -> None:
    with open_q(tmpfs_qdir, retention_bytes=800) as q:
        write_bookmark(tmpfs_qdir, "spark", 5)
        for _ in range(100):
            q.put(PAYLOAD)
        with caplog.at_level(logging.WARNING, logger="journaled"):
            q.archive()
        keep = q.journal.files[0].first_id
        assert keep > 5
        # one WARNING, or several if a background pass archived part of it first: together
        # they name exactly the ids the bookmark lost
        reported: list[int] = []
        for rec in caplog.records:
            m = re.search(r"bookmark spark: items (\d+)\.\.(\d+) are past retention", rec.getMessage())
            if m:
                reported.extend(range(int(m.group(1)), int(m.group(2)) + 1))
        assert sorted(set(reported)) == list(range(5, keep))
