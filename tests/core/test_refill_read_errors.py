"""A read error while a reader refills from the journal (read-behind) leaves the reader whole.

The item taken when the refill failed is still delivered, first and exactly once; a put whose
hand-off to a waiting consumer triggers a failing refill does not fail (it is already in the
journal: a retry would duplicate it), and every other reader still gets the items.
"""

from __future__ import annotations

import errno

import pytest

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.disk import fileio

QUIET = QueueConfig(sync="never", checkpoint_interval=3600.0)


class _FailingPread(fileio.FileOps):
    """Fails every pread while ``armed`` (a read error while reading back from the journal)."""

    def __init__(self) -> None:
        self.armed = False

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        if self.armed:
            raise OSError(errno.EIO, "injected read error")
        return super().pread(fd, size, offset)


def _drain(reader) -> list[bytes]:
    out = []
    while True:
        try:
            item = reader.get(block=False)
        except Empty:
            return out
        out.append(item.data)
        reader.commit(item)


def test_read_error_during_read_behind_refill_strands_no_item(qdir):
    payloads = [b"%03d" % i + b"x" * 97 for i in range(10)]
    ops = _FailingPread()
    with fileio.use(ops), JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r", ReaderConfig(max_memory=200))
        q.put_many(payloads)  # two items in memory, the rest on disk only (read-behind)
        ops.armed = True
        with pytest.raises(OSError):
            r.get(block=False)  # the refill after taking the first item fails
        ops.armed = False
        assert r.stats().open_reads == 0
        # the item taken when the refill failed is still delivered, first and exactly once
        assert _drain(r) == payloads
        assert r.head == q.journal.next_id


def test_read_error_while_handing_a_put_to_a_waiter_does_not_fail_the_put(qdir):
    """The put is already in the journal when a read-behind refill (for a waiting consumer of
    one reader) fails: put must not raise (a retry would duplicate it) and every other reader
    must still get the items."""
    import threading
    import time

    payloads = [b"%03d" % i + b"x" * 97 for i in range(6)]
    ops = _FailingPread()
    with fileio.use(ops), JournaledQueue(qdir, QUIET) as q:
        slow = q.reader("slow", ReaderConfig(max_memory=200))
        other = q.reader("other")
        got: list[bytes] = []
        waiter = threading.Thread(target=lambda: got.append(slow.get(timeout=60).data))
        waiter.start()
        deadline = time.monotonic() + 30
        while not slow.core.waiters and time.monotonic() < deadline:
            time.sleep(0.001)
        ops.armed = True
        ids = q.put_many(payloads)  # slow switches to read-behind; its refill fails
        ops.armed = False
        assert ids == list(range(1, 7))
        assert _drain(other) == payloads
        q.put(b"wake")  # the next put hands the waiting consumer its item
        waiter.join(60)
        assert got == [payloads[0]]
        slow.commit(1)
        assert _drain(slow) == payloads[1:] + [b"wake"]
