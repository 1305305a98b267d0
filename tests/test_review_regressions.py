"""Regressions found by a correctness review of the core (reader, queue, checkpoints).

Each test pins one bug that was fixed: an error in the middle of an operation must leave the
reader's state whole (no item stranded, no checkpoint silently skipped)."""

from __future__ import annotations

import errno
import os

import pytest

from journaled import DeadLetter, Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.disk import checkpointfiles as ckp
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


def test_checkpoint_write_failure_is_retried_by_the_next_checkpoint(qdir, monkeypatch):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b"])
        r.commit(r.get(block=False))
        real = ckp.write_checkpoint

        def full_disk(path: str, data: object, mode: int) -> None:
            raise OSError(errno.ENOSPC, "injected: no space left")

        monkeypatch.setattr(ckp, "write_checkpoint", full_disk)
        with pytest.raises(OSError):
            q.checkpoint()
        monkeypatch.setattr(ckp, "write_checkpoint", real)
        q.checkpoint()  # the disk has room again: the reader's new head must reach it now
        on_disk = ckp.read_checkpoint(ckp.checkpoint_path(q.path, q.name, "r"))
        assert on_disk is not None and on_disk.head == r.head == 2
        q.put(b"c")  # keep the close from being the thing that writes it


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc/self/fd to count fds")
def test_sync_never_rotation_does_not_keep_every_retired_file_open(qdir):
    with JournaledQueue(qdir, QueueConfig(sync="never", journal_size=256, checkpoint_interval=3600.0)) as q:
        r = q.reader("r")
        before = _open_fds()
        for _ in range(200):  # one record per file: 200 rotations
            q.put(b"x" * 100)
            r.commit(r.get(block=False))
        q.checkpoint()
        q.archive()
        # archived files are gone from the journal; their descriptors must not pile up either
        # (each one pins a deleted file's disk space and counts against RLIMIT_NOFILE)
        assert len(q.journal.files) <= 2
        assert _open_fds() - before < 10


def test_sync_never_explicit_sync_still_covers_retired_files(qdir):
    cfg = QueueConfig(sync="never", journal_size=256, checkpoint_interval=3600.0)
    with JournaledQueue(qdir, cfg) as q:
        for i in range(5):
            q.put(b"%03d" % i + b"x" * 97)
        q.sync()  # must not fail now that retired files are synced by path
    with JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        assert [int(r.get(block=False).data[:3]) for _ in range(5)] == list(range(5))


def test_dead_letter_into_the_same_queue_survives_close(qdir):
    """docs/design.md: "a sink may put into the same queue", and the sink sees every item at
    least once.  Items still parked for such a sink at close() used to be dropped: the sink's
    put raised QueueClosed and the item was committed anyway."""
    import time

    cfg = QueueConfig(sync="never", checkpoint_interval=3600.0)
    q = JournaledQueue(qdir, cfg)

    class SinkReachedOnlyWhileClosing:
        """Puts into ``q`` once ``q.close()`` has begun: the hand-off meets a closing queue."""

        def put(self, data: bytes) -> int:
            deadline = time.monotonic() + 30
            while not q.closed and time.monotonic() < deadline:
                time.sleep(0.001)
            return q.put(data)

    r = q.reader("r", ReaderConfig(max_errors=1, dead_letter=SinkReachedOnlyWhileClosing()))
    q.put(b"poison")
    r.abort(r.get(block=False))  # parked for the dead-letter sink (this very queue)
    q.close()
    with JournaledQueue(qdir, cfg) as q2:
        r2 = q2.reader("r", ReaderConfig(max_errors=1, dead_letter=q2))
        with pytest.raises(Empty):
            r2.get(block=False)  # still poison: goes to the sink, not to the consumer
        q2.run_policies()
        assert DeadLetter.decode(r2.get(block=False).data).data == b"poison"  # the sink's copy, put here


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


def test_background_thread_survives_an_unexpected_error_and_keeps_checkpointing(tmp_path, caplog):
    import logging

    from journaled import JournaledQueue, QueueConfig

    q = JournaledQueue(str(tmp_path / "q"), QueueConfig(checkpoint_interval=0.05), name="q")
    try:
        r = q.reader("r")
        real_checkpoint = q.checkpoint
        calls = {"n": 0}

        def flaky_checkpoint() -> None:
            calls["n"] += 1
            if calls["n"] == 1:
                raise RuntimeError("a bug in a maintenance step")
            real_checkpoint()

        q.checkpoint = flaky_checkpoint  # type: ignore[method-assign]
        caplog.set_level(logging.ERROR, logger="journaled")
        q.put(b"x")
        r.commit(r.get(timeout=5))
        import time

        deadline = time.monotonic() + 10
        while calls["n"] < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert calls["n"] >= 3, "the background thread stopped after the first error"
        import threading

        assert any(t.name == "journaled-q" and t.is_alive() for t in threading.enumerate())
        assert "failed unexpectedly" in caplog.text
    finally:
        q.close()


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
