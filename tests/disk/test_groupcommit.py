"""Sync policies: group commit under sync="always", kill -9 survival, fsync failure poisoning."""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from journaled import Empty, JournaledQueue, JournalIOError, QueueClosed, QueueConfig
from journaled.disk import fileio
from journaled.offline.scan import JournalScanner


class CountingOps(fileio.FileOps):
    """Counts syncs and remembers, per path, how many bytes the last successful sync covered.

    ``delay`` makes every fdatasync take that long, like a real disk, so that group commit's
    batching does not depend on how fast the test machine's disk happens to be.
    """

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay
        self.lock = threading.Lock()
        self.paths: dict[int, str] = {}
        self.fdatasyncs = 0
        self.dir_syncs = 0
        self.synced: dict[str, int] = {}
        self.per_path: dict[str, int] = {}
        self.fail: OSError | None = None

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        with self.lock:
            self.paths[fd] = path
        return fd

    def _sync(self, fd: int, real) -> None:
        size = os.fstat(fd).st_size
        if self.delay:
            time.sleep(self.delay)
        if self.fail is not None:
            raise self.fail
        real(fd)
        with self.lock:
            self.fdatasyncs += 1
            path = self.paths[fd]
            self.synced[path] = max(self.synced.get(path, 0), size)
            self.per_path[path] = self.per_path.get(path, 0) + 1

    def journal_syncs(self) -> int:
        """fsyncs of journal files only (checkpoints and the registry are synced too)."""
        return sum(n for p, n in self.per_path.items() if os.path.basename(p).split(".")[-1].isdigit())

    def fdatasync(self, fd: int) -> None:
        self._sync(fd, os.fdatasync)

    def fsync(self, fd: int) -> None:
        self._sync(fd, os.fsync)

    def fsync_dir(self, path: str) -> None:
        if self.fail is not None:
            raise self.fail
        super().fsync_dir(path)
        with self.lock:
            self.dir_syncs += 1


def payload(i: int) -> bytes:
    return b"ack-%d|" % i + b"z" * (i % 50)


def read_all(qdir: str) -> dict[int, bytes]:
    return {r.id: r.payload for r in JournalScanner(qdir).records()}


# ----------------------------------------------------------------------------- group commit
def test_eight_threads_share_fsyncs_and_none_returns_before_its_record_is_synced(qdir):
    threads, per_thread = 8, 40
    ops = CountingOps(delay=0.003)
    acked: list[tuple[int, int]] = []  # (id, bytes of the file synced when put returned)
    acked_lock = threading.Lock()
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        [path] = [p for p in ops.paths.values() if os.path.basename(p).startswith("q.")]
        base_syncs, base_rounds = ops.journal_syncs(), q.fsync_count
        start = threading.Barrier(threads)

        def work(t: int) -> None:
            start.wait()
            for k in range(per_thread):
                i = q.put(payload(t * 1000 + k))
                with acked_lock:
                    acked.append((i, ops.synced.get(path, 0)))

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        rounds = q.fsync_count - base_rounds
        syncs = ops.journal_syncs() - base_syncs
        q.close()
    puts = threads * per_thread
    assert len(acked) == puts
    assert rounds == syncs  # every fsync the journal made was a group-commit round
    assert rounds <= puts / 2, f"{rounds} fsyncs for {puts} puts"
    # No put returned before the bytes of its own record were covered by a completed fsync.
    ends = {r.id: r.offset + r.size for r in JournalScanner(qdir).records()}
    assert len(ends) == puts
    for item_id, synced in acked:
        assert synced >= ends[item_id]


def test_put_many_is_one_write_and_one_fsync(qdir):
    ops = CountingOps()
    with fileio.use(ops):
        with JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q") as q:
            before = ops.journal_syncs()
            assert q.put_many([b"a", b"b", b"c"]) == [1, 2, 3]
            assert ops.journal_syncs() - before == 1


def test_periodic_sync_returns_once_everything_put_is_durable(qdir):
    ops = CountingOps()
    with fileio.use(ops):
        with JournaledQueue(qdir, config=QueueConfig(sync=30.0), name="q") as q:
            q.put_many([payload(i) for i in range(100)])
            q.sync()
            [path] = [p for p in ops.paths.values() if os.path.basename(p).startswith("q.")]
            assert ops.synced[path] == os.path.getsize(path)


def test_never_policy_sync_also_syncs_files_retired_by_rotation(qdir):
    ops = CountingOps()
    with fileio.use(ops):
        with JournaledQueue(qdir, config=QueueConfig(sync="never", journal_size=300), name="q") as q:
            q.put_many([payload(i) for i in range(40)])
            assert ops.journal_syncs() == 0  # "never": we leave it to the OS...
            q.sync()  # ...until asked
            # from the directory, not ops.paths: retired files' fds are closed, so numbers repeat
            files = [
                os.path.join(qdir, n) for n in os.listdir(qdir) if n.startswith("q.") and n[2:].isdigit()
            ]
            assert len(files) > 3
            for p in files:
                assert ops.synced.get(p) == os.path.getsize(p), p
            assert ops.dir_syncs >= 1  # the new files' directory entries


# ----------------------------------------------------------------------------- kill -9
CHILD = textwrap.dedent(
    """
    import sys, threading
    from journaled import JournaledQueue, QueueConfig

    def payload(i):
        return b"ack-%d|" % i + b"z" * (i % 50)

    q = JournaledQueue(sys.argv[1], config=QueueConfig(sync=sys.argv[2]), name="q")
    out_lock = threading.Lock()

    def work(t):
        k = 0
        while True:
            item_id = q.put(b"pending-%d-%d" % (t, k))  # 4 threads: group commit at work
            with out_lock:  # acknowledged: tell the parent which id holds which payload
                sys.stdout.write("%d %d %d\\n" % (item_id, t, k))
                sys.stdout.flush()
            k += 1

    for t in range(4):
        threading.Thread(target=work, args=(t,), daemon=True).start()
    threading.Event().wait()
    """
)


@pytest.mark.parametrize("sync", ["always", "never"])
def test_every_acknowledged_put_survives_kill_9(qdir, sync):
    child = subprocess.Popen([sys.executable, "-c", CHILD, qdir, sync], stdout=subprocess.PIPE, text=True)
    acked: dict[int, bytes] = {}
    try:
        while len(acked) < 300:
            line = child.stdout.readline()
            assert line, "child died early"
            item_id, t, k = map(int, line.split())
            acked[item_id] = b"pending-%d-%d" % (t, k)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    with JournaledQueue(qdir, config=QueueConfig(sync="never")) as q:
        r = q.reader("check")
        got = {}
        while True:
            try:
                item = r.get(block=False)
            except Empty:
                break
            got[item.id] = item.data
        for item_id, data in acked.items():
            assert got.get(item_id) == data, item_id
        assert q.put(b"after") == max(got) + 1


# ----------------------------------------------------------------------------- fsync failure
def test_failed_fsync_reaches_the_caller_and_poisons_the_queue_until_reopened(qdir):
    ops = CountingOps()
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        acked = [q.put(payload(i)) for i in range(1, 6)]
        ops.fail = OSError(errno.EIO, "Input/output error")
        with pytest.raises(JournalIOError) as err:
            q.put(payload(6))
        assert err.value.errno == errno.EIO
        ops.fail = None  # the disk "recovers": a retried fsync could now falsely succeed
        with pytest.raises(JournalIOError, match="reopen"):
            q.put(payload(7))
        with pytest.raises(JournalIOError):
            q.put_many([payload(8)])
        with pytest.raises(JournalIOError):
            q.sync()
        q.close()  # must not raise, must not claim the failed bytes durable
        with pytest.raises(QueueClosed):
            q.put(b"x")
    with JournaledQueue(qdir, config=QueueConfig(sync="always")) as q:
        got = read_all(qdir)
        for i in acked:
            assert got[i] == payload(i)
        new = q.put(b"fresh")
        assert new > max(got)


def test_failed_fsync_fails_every_waiting_thread_and_none_claims_success(qdir):
    ops = CountingOps(delay=0.002)
    results: list[object] = []
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        q.put(b"first")
        ops.fail = OSError(errno.EIO, "Input/output error")
        start = threading.Barrier(8)

        def work(t: int) -> None:
            start.wait()
            try:
                results.append(q.put(payload(t)))
            except JournalIOError as exc:
                results.append(exc)

        pool = [threading.Thread(target=work, args=(t,)) for t in range(8)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        q.close()
    assert len(results) == 8
    assert all(isinstance(r, JournalIOError) for r in results), results


def test_failed_background_fsync_poisons_a_periodic_queue(qdir):
    ops = CountingOps()
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync=0.01), name="q")
        q.put(b"ok")
        q.sync()
        ops.fail = OSError(errno.EIO, "Input/output error")
        q.put(b"buffered")  # accepted into the buffer; the flusher's fsync will fail
        with pytest.raises(JournalIOError):
            q.sync()
        ops.fail = None
        with pytest.raises(JournalIOError):
            q.put(b"refused")
        q.close()
    assert read_all(qdir)[1] == b"ok"


def test_failed_write_enospc_reaches_the_caller_and_nothing_acknowledged_is_lost(qdir):
    class FullDisk(CountingOps):
        full = False

        def write(self, fd: int, data) -> int:
            if self.full and os.path.basename(self.paths.get(fd, "")).startswith("q."):
                half = bytes(data)[: len(data) // 2]
                os.write(fd, half)  # a short write reached the file before the disk filled up
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write(fd, data)

    ops = FullDisk()
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        acked = q.put_many([payload(i) for i in range(1, 4)])
        ops.full = True
        with pytest.raises(JournalIOError) as err:
            q.put(payload(4))
        assert err.value.errno == errno.ENOSPC
        ops.full = False
        with pytest.raises(JournalIOError):
            q.put(payload(5))
        q.close()
    with JournaledQueue(qdir, config=QueueConfig(sync="always")) as q:
        [event] = q.recovery_report  # the half-written record is a torn tail, cut on reopen
        assert event.action == "truncated-tail"
        got = read_all(qdir)
        assert {i: got[i] for i in acked} == {i: payload(i) for i in acked}
        assert q.put(b"after") == 4
