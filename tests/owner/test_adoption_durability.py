"""Spool adoption is exactly-once even when the journal fails: a spooled batch stays pending
until it is durably in the journal, and is adopted once, for good."""

from __future__ import annotations

import errno
import time

import pytest

from journaled import Empty, JournaledQueue, JournalIOError, QueueConfig
from journaled.disk import fileio
from journaled.owner.adoption import spool_put


class _FailJournalWrites(fileio.FileOps):
    """Fails, once, the write of journal bytes containing ``marker`` (EIO)."""

    def __init__(self, marker: bytes) -> None:
        self.marker = marker
        self.armed = False

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        if self.armed and self.marker in bytes(data):
            self.armed = False
            raise OSError(errno.EIO, "injected write error")
        return super().write(fd, data)


def test_a_spool_batch_stays_pending_until_it_is_durably_in_the_journal(qdir):
    ops = _FailJournalWrites(b"spooled-a")
    cfg = QueueConfig(sync=3600.0, checkpoint_interval=3600.0)
    with fileio.use(ops):
        q = JournaledQueue(qdir, cfg)
        q.reader("r")
        time.sleep(0.2)  # the background pass kicked by the new reader is over
        assert spool_put(qdir, [b"spooled-a", b"spooled-b"], key="k1")
        ops.armed = True
        with pytest.raises(JournalIOError):
            q.adopt_spool()  # appended, but the write-out before its fsync fails
        try:
            q.adopt_spool()  # a second pass must not declare the batch adopted
        except JournalIOError:
            pass
        q.close()  # logs the failed final sync; nothing is claimed durable
    with JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        got = []
        while True:
            try:
                got.append(r.get(block=False).data)
            except Empty:
                break
        assert got == [b"spooled-a", b"spooled-b"]
        assert not spool_put(qdir, [b"spooled-a", b"spooled-b"], key="k1")  # adopted once, for good
