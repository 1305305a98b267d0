"""The journal's file descriptors: retired files do not keep theirs open, and no descriptor is
used where another thread may close it (a sync racing a rotation, a read racing archiving)."""

from __future__ import annotations

import os
import threading
import time

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio


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
