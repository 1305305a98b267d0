"""The four bug classes the old tangle let in (issue 11, item 9), one regression test each.

a. a read is identified by its delivery, not by the item id;
b. no file descriptor is used where another thread may close it;
c. user callbacks (expiry / dead-letter sinks) cannot stall the engine;
d. spool adoption is exactly-once even when the journal fails.

Each test failed on the code before the redesign (see the closing note of issue 11).
"""

from __future__ import annotations

import errno
import threading
import time

import pytest

from journaled import Empty, JournaledQueue, JournalIOError, QueueConfig, ReaderConfig, UnknownRead
from journaled.disk import fileio
from journaled.offline.scan import JournalScanner
from journaled.owner.adoption import spool_put

QUIET = QueueConfig(checkpoint_interval=3600.0)


# ----------------------------------------------------------------------------- a. deliveries
def test_late_commit_after_open_read_timeout_raises_and_cannot_settle_the_new_delivery(qdir):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=1.0))
        q.put(b"job")
        first = r.get(block=False)  # consumer A
        time.sleep(1.1)
        q.run_policies()  # A's read is taken away (the background tick does the same)
        second = r.get(block=False)  # consumer B gets the item again
        assert (second.id, second.error_count) == (first.id, 1)
        with pytest.raises(UnknownRead):
            r.commit(first)  # A, late
        with pytest.raises(Empty):
            r.get(block=False)  # B's read is still open: nobody else gets the item
        r.commit(second)  # and B can finish it
        assert r.stats().committed == 1 and r.stats().open_reads == 0


def test_late_abort_after_open_read_timeout_is_unknown_read_and_no_third_consumer_gets_it(qdir):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=1.0))
        q.put(b"job")
        first = r.get(block=False)
        time.sleep(1.1)
        q.run_policies()
        second = r.get(block=False)
        with pytest.raises(UnknownRead):
            r.abort(first)
        with pytest.raises(Empty):
            r.get(block=False)  # would have been a third delivery while B holds it
        assert r.stats().open_reads == 1
        r.commit(second)


# ----------------------------------------------------------------------------- b. descriptors
class _SlowSyncs(fileio.FileOps):
    """Every fdatasync takes a little while: a rotation lands in the middle of a sync."""

    def fdatasync(self, fd: int) -> None:
        time.sleep(0.002)
        super().fdatasync(fd)


def test_sync_racing_rotation_never_uses_a_closed_or_reused_descriptor(qdir):
    cfg = QueueConfig(sync="never", journal_size=4096, checkpoint_interval=3600.0)
    errors: list[BaseException] = []
    with fileio.use(_SlowSyncs()):
        q = JournaledQueue(qdir, cfg)
        stop = threading.Event()

        def syncer() -> None:
            while not stop.is_set():
                try:
                    q.sync()
                except BaseException as exc:  # noqa: BLE001 - collected and asserted below
                    errors.append(exc)
                    return

        t = threading.Thread(target=syncer, daemon=True)
        t.start()
        try:
            for i in range(3000):  # ~1 rotation every 30 puts
                q.put(b"%06d" % i + b"x" * 94)
        finally:
            stop.set()
            t.join(30)
        assert not errors, errors[0]
        q.sync()  # not poisoned
        q.close()
    with JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        got = [r.get(block=False).data[:6] for _ in range(3000)]
        assert got == [b"%06d" % i for i in range(3000)]


# ----------------------------------------------------------------------------- c. sinks
def _journal_bytes(qdir: str) -> int:
    scanner = JournalScanner(qdir)
    return sum(len(rec.payload) for rec in scanner.records())


def test_a_slow_sink_does_not_delay_the_periodic_flush(qdir):
    release = threading.Event()
    reached = threading.Event()

    def slow_sink(item: object) -> None:
        reached.set()
        release.wait(20)

    q = JournaledQueue(qdir, QueueConfig(sync=0.05, checkpoint_interval=3600.0))
    try:
        q.reader("r", ReaderConfig(expire_to=slow_sink))
        q.put(b"short-lived", ttl=0.001)
        assert reached.wait(10), "the expired item never reached its sink"
        q.put(b"y" * 1000)  # made while the sink is busy
        deadline = time.monotonic() + 2.0
        while _journal_bytes(qdir) < len(b"short-lived") + 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _journal_bytes(qdir) == len(b"short-lived") + 1000, (
            "the put was not flushed while the sink ran"
        )
    finally:
        release.set()
        q.close()


def test_a_sink_may_close_the_queue(qdir):
    q = JournaledQueue(qdir, QUIET)
    closed_by_sink = threading.Event()

    def closing_sink(item: object) -> None:
        q.close()
        closed_by_sink.set()

    q.reader("r", ReaderConfig(expire_to=closing_sink))
    q.put(b"x", ttl=0.001)
    assert closed_by_sink.wait(10), "close() called from a sink never returned"
    done = threading.Event()
    t = threading.Thread(target=lambda: (q.close(), done.set()), daemon=True)
    t.start()
    assert done.wait(10), "a later close() hangs"
    with JournaledQueue(qdir, QUIET) as again:  # the directory was released
        assert again.readers() == ["r"]


# ----------------------------------------------------------------------------- d. spool
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


class _SlowReads(fileio.FileOps):
    """A pread that takes its time when asked to: archiving lands in the middle of it."""

    def __init__(self) -> None:
        self.slow = threading.Event()
        self.inside = threading.Event()

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        # only the test's reader thread: the queue's own threads may read too
        if self.slow.is_set() and threading.current_thread().name == "slow-reader":
            self.inside.set()
            time.sleep(0.3)
        return super().pread(fd, size, offset)


def test_archiving_a_file_while_it_is_being_read_never_closes_the_descriptor_under_the_read(qdir):
    from journaled.log.journal import Cursor

    ops = _SlowReads()
    cfg = QueueConfig(journal_size=1024, sync="never", checkpoint_interval=3600.0)
    with fileio.use(ops), JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        q.reader("pin")  # holds every file until the moment chosen below (no early archiving)
        q.put_many([b"%04d" % i + b"p" * 96 for i in range(40)])
        for _ in range(40):
            r.commit(r.get(block=False))
        q.checkpoint()
        first = q.journal.files[0]
        got: list[object] = []

        def read_first_file() -> None:
            try:
                got.append(
                    q.journal.read(Cursor(first.ms, first.header.size, first.first_id), max_items=1)[0]
                )
            except BaseException as exc:  # noqa: BLE001 - asserted below
                got.append(exc)

        q.journal.read(Cursor(first.ms, first.header.size, first.first_id), max_items=1)  # opens its fd
        ops.slow.set()
        reader = threading.Thread(target=read_first_file, name="slow-reader", daemon=True)
        reader.start()
        assert ops.inside.wait(10)  # the read is inside its pread now
        ops.slow.clear()
        q.remove_reader("pin")
        q.archive()  # the file goes, and with it the journal's descriptor of it
        reader.join(10)
        assert first.path not in [f.path for f in q.journal.files]
        [result] = got
        assert isinstance(result, list) and [rec.payload[:4] for rec in result] == [b"0000"], result
