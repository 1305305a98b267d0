"""A file created ahead of need (``Writer.reserve``: before a batch is encoded, for each file
its plain size would rotate into) is named when it is created, and may wait unused when the
batch compresses into less: appending to it can begin long after its name.  What reads times
from the files must use when appending began (the header's ``created_ms``), not the name:
retention by age, and the key window a new owner rebuilds from the journal's tail."""

from __future__ import annotations

import os

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.format import compressed
from journaled.log import retention
from journaled.log import state as log_state
from journaled.owner import putpath
from support.clock import FakeClock

pytestmark = pytest.mark.skipif(not compressed.available(), reason="needs a zstd binding (the zstd extra)")

CFG = QueueConfig(
    compression="zstd", journal_size=700, sync="never", checkpoint_interval=3600.0, dedup_window=5.0
)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(log_state, "CLOCK", c)  # file names and headers
    monkeypatch.setattr(putpath, "CLOCK", c)  # add times
    return c


def spare_used_late(q: JournaledQueue, clock: FakeClock) -> None:
    """A batch whose plain size needs a new file compresses into the current one (the new file
    waits, named now); 10 s later incompressible items fill the current file and go on in it."""
    q.put_many([b"a" * 100] * 10)  # 10 plain records: 1,330 bytes > 700; one unit: ~60 bytes
    clock.advance(10.0)
    q.put_many([os.urandom(100) for _ in range(8)])  # plain (they do not compress): a rotation
    files = q.journal.files
    assert files[1].header.created_ms - files[1].ms >= 9_000, "the second file was not used late"


def test_retention_by_age_counts_from_when_appending_to_the_next_file_began(qdir, clock):
    with JournaledQueue(qdir, CFG) as q:
        q.reader("r")
        spare_used_late(q, clock)
        clock.advance(1.0)  # the first file's newest records are 1 s old
        state = q.journal.appending_parts()[0]
        past, _keep = retention.past_retention(state, 5_000, None, clock.time_ns() // 1_000_000)
        assert past == [], "a file whose records are 1 s old is past a retention age of 5 s"


def test_a_key_put_just_before_a_late_rotation_is_remembered_by_the_next_owner(qdir, clock):
    with JournaledQueue(qdir, CFG) as q:
        q.reader("r")
        q.put_many([b"a" * 100] * 10)
        clock.advance(10.0)
        first = q.put_many([os.urandom(100) for _ in range(3)], keys=[None, b"k", None])[1]
        q.put_many([os.urandom(100) for _ in range(8)])  # rotates into the file named 10 s ago
        assert q.journal.files[1].header.created_ms - q.journal.files[1].ms >= 9_000
    clock.advance(1.0)  # still within the 5 s window
    with JournaledQueue(qdir, CFG) as q:
        assert q.put(b"again", key=b"k") == first, "the key window forgot a key put 1 s ago"
