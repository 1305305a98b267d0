"""The promises of group commit's leader/follower scheme (journaled/disk/groupcommit.py).

The first tests drive :class:`GroupCommit` against a fake journal whose fsync can be held at a
gate, so every interleaving they check is forced, not hoped for.  The last ones run a real queue
with ``sync="always"`` through the ``fileio`` seam and check the order of writes, fsyncs and
acknowledgements.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable

import pytest

from journaled import JournaledQueue, JournalIOError, QueueConfig
from journaled.disk import fileio
from journaled.disk.groupcommit import GroupCommit
from journaled.offline.scan import JournalScanner


def wait_until(cond: Callable[[], bool], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached"
        time.sleep(0.001)


class FakeJournal:
    """Appends advance a byte count; a flush "writes out" everything appended so far.

    ``gate`` (when set) holds every fsync until it is set; ``fail`` makes fsyncs from number
    ``fail_from`` on raise and poisons the journal, so later flushes raise too, like
    ``LogState.check_writable``.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.appended = 0
        self.log: list[tuple[str, int]] = []  # ("start" | "end" | "failed", bytes covered)
        self.gate: threading.Event | None = None
        self.fail: OSError | None = None
        self.fail_from = 1  # with ``fail``: the first fsync (1-based) that fails
        self.poisoned: OSError | None = None
        self.commits = GroupCommit(self.flush)

    def append(self, n: int = 10) -> int:
        with self.lock:
            self.appended += n
            return self.appended

    def flush(self) -> tuple[int, Callable[[bool], None]]:
        with self.lock:
            if self.poisoned is not None:
                raise OSError(self.poisoned.errno, "journal poisoned")
            target = self.appended

        def fsync(needed: bool) -> None:
            if not needed:
                return
            self.log.append(("start", target))
            gate = self.gate
            if gate is not None:
                gate.wait(30)
            if self.fail is not None and self.starts() >= self.fail_from:
                self.poisoned = self.fail
                self.log.append(("failed", target))
                raise self.fail
            self.log.append(("end", target))

        return target, fsync

    def starts(self) -> int:
        return sum(1 for kind, _ in self.log if kind == "start")


def put_in_thread(j: FakeJournal, results: dict[int, object], key: int) -> threading.Thread:
    """Append, then wait for durability in a new thread; the outcome lands in ``results``."""
    seq = j.append()

    def run() -> None:
        try:
            j.commits.wait_durable(seq)
            results[key] = ("durable", seq, j.commits.durable, list(j.log))
        except OSError as exc:
            results[key] = exc

    th = threading.Thread(target=run, daemon=True)
    th.start()
    return th


def test_a_caller_arriving_during_an_fsync_waits_for_the_next_fsync_not_the_one_in_flight():
    j = FakeJournal()
    j.gate = threading.Event()
    results: dict[int, object] = {}
    leader = put_in_thread(j, results, 0)
    wait_until(lambda: j.starts() == 1)  # the leader's fsync covers the first 10 bytes only
    follower = put_in_thread(j, results, 1)
    wait_until(lambda: j.commits.waiting == 1)
    assert 1 not in results
    j.gate.set()
    leader.join()
    follower.join()
    kind, seq, durable, log = results[1]  # type: ignore[misc]
    assert kind == "durable" and seq == 20 and durable >= 20
    # it returned after a second fsync, one that covered its bytes, had ended
    assert ("end", 20) in log and log.index(("end", 20)) > log.index(("end", 10))


def test_callers_that_arrive_during_one_fsync_all_share_the_next_one():
    j = FakeJournal()
    j.gate = threading.Event()
    results: dict[int, object] = {}
    leader = put_in_thread(j, results, 0)
    wait_until(lambda: j.starts() == 1)
    followers = [put_in_thread(j, results, k) for k in range(1, 8)]
    wait_until(lambda: j.commits.waiting == 7)
    j.gate.set()
    for th in [leader, *followers]:
        th.join()
    assert j.starts() == 2 and j.commits.fsyncs == 2
    assert j.log[-1] == ("end", 80)
    assert all(results[k][0] == "durable" for k in range(8))  # type: ignore[index]


def test_a_failed_fsync_reaches_every_caller_of_its_batch_as_an_error_and_none_is_told_durable():
    j = FakeJournal()
    j.gate = threading.Event()
    results: dict[int, object] = {}
    leader = put_in_thread(j, results, 0)
    wait_until(lambda: j.starts() == 1)
    followers = [put_in_thread(j, results, k) for k in range(1, 6)]
    wait_until(lambda: j.commits.waiting == 5)
    j.fail = OSError(errno.EIO, "Input/output error")  # the leader's fsync and every later one
    j.gate.set()
    for th in [leader, *followers]:
        th.join()
    assert all(isinstance(results[k], OSError) for k in range(6)), results
    assert j.commits.durable == 0 and j.commits.fsyncs == 0
    late = put_in_thread(j, results, 6)  # the journal stays poisoned: no later claim either
    late.join()
    assert isinstance(results[6], OSError)


def test_a_failed_fsync_after_a_good_one_fails_its_whole_batch_and_durable_stays_at_the_good_one():
    j = FakeJournal()
    j.gate = threading.Event()
    j.fail = OSError(errno.EIO, "Input/output error")
    j.fail_from = 2  # the leader's fsync succeeds, the next one (its followers') fails
    results: dict[int, object] = {}
    leader = put_in_thread(j, results, 0)
    wait_until(lambda: j.starts() == 1)
    followers = [put_in_thread(j, results, k) for k in range(1, 4)]
    wait_until(lambda: j.commits.waiting == 3)
    j.gate.set()
    for th in [leader, *followers]:
        th.join()
    assert results[0][0] == "durable"  # type: ignore[index]
    assert all(isinstance(results[k], OSError) for k in range(1, 4)), results
    assert j.commits.durable == 10 and j.commits.fsyncs == 1


def test_a_caller_interrupted_just_as_it_was_handed_leadership_still_leads_so_nobody_hangs(monkeypatch):
    from journaled.disk import groupcommit

    class InterruptedOnWake(groupcommit._Waiter):
        """The waiter of the thread named "interrupted": its sleep ends in KeyboardInterrupt."""

        def __init__(self) -> None:
            super().__init__()
            real = self.lock
            if threading.current_thread().name == "interrupted":

                class Lock:
                    def acquire(self) -> bool:
                        real.acquire()
                        raise KeyboardInterrupt

                    def release(self) -> None:
                        real.release()

                self.lock = Lock()  # type: ignore[assignment]

    monkeypatch.setattr(groupcommit, "_Waiter", InterruptedOnWake)
    j = FakeJournal()
    j.gate = threading.Event()
    results: dict[int, object] = {}
    leader = put_in_thread(j, results, 0)
    wait_until(lambda: j.starts() == 1)
    seq = j.append()
    interrupted: list[BaseException] = []

    def run() -> None:
        try:
            j.commits.wait_durable(seq)
        except KeyboardInterrupt as exc:
            interrupted.append(exc)

    first = threading.Thread(
        target=run, name="interrupted", daemon=True
    )  # first in line: it is handed the lead
    first.start()
    wait_until(lambda: j.commits.waiting == 1)
    second = put_in_thread(j, results, 2)
    wait_until(lambda: j.commits.waiting == 2)
    j.gate.set()
    for th in (leader, first, second):
        th.join(30)
        assert not th.is_alive()
    assert len(interrupted) == 1
    assert results[2][0] == "durable" and j.commits.durable >= 30  # type: ignore[index]


def test_every_fsync_round_is_counted_even_one_too_fast_for_the_clock(monkeypatch):
    from journaled.disk import groupcommit

    monkeypatch.setattr(groupcommit.time, "monotonic", lambda: 1000.0)  # a coarse clock
    j = FakeJournal()
    for _ in range(3):
        j.commits.wait_durable(j.append())
    assert j.commits.fsyncs == 3 == j.starts()
    j.commits.wait_durable(j.appended)  # nothing new: no fsync, nothing counted
    assert j.commits.fsyncs == 3


# ----------------------------------------------------------------------------- a real queue
class OrderOps(fileio.FileOps):
    """Logs, in one list, every write to a journal file (with the file's size after it) and the
    start and end of every fdatasync; the workload adds ``("ack", id)`` when a put returns.

    ``delay`` makes every fdatasync take that long, like a real disk; it also widens the window
    in which a put that returned too early would be caught acknowledging before the sync ended.
    """

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.log: list[tuple[str, str, int]] = []
        self.paths: dict[int, str] = {}
        self.tokens = iter(range(1, 1 << 62))
        self.fail: OSError | None = None

    def _journal(self, fd: int) -> str | None:
        path = self.paths.get(fd)
        return path if path and os.path.basename(path).split(".")[-1].isdigit() else None

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        self.paths[fd] = path
        return fd

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        n = super().write(fd, data)
        path = self._journal(fd)
        if path is not None:
            self.log.append(("write", path, os.fstat(fd).st_size))
        return n

    def fdatasync(self, fd: int) -> None:
        path = self._journal(fd)
        if path is None:
            super().fdatasync(fd)
            return
        token = next(self.tokens)
        self.log.append(("start", path, token))
        time.sleep(self.delay)
        if self.fail is not None:
            self.log.append(("failed", path, token))
            raise self.fail
        super().fdatasync(fd)
        self.log.append(("end", path, token))


def run_producers(q: JournaledQueue, ops: OrderOps, threads: int, per_thread: int) -> list[object]:
    """``threads`` threads each put ``per_thread`` items; every return is logged as it happens."""
    start = threading.Barrier(threads)
    errors: list[object] = []

    def work(t: int) -> None:
        start.wait()
        for k in range(per_thread):
            try:
                item_id = q.put(b"t%d-k%d|" % (t, k) + b"x" * 200)
            except JournalIOError as exc:
                errors.append(exc)
                return
            ops.log.append(("ack", "", item_id))

    pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    return errors


def test_every_put_returns_after_an_fsync_that_started_after_its_bytes_were_written(qdir):
    threads, per_thread = 8, 30
    ops = OrderOps(delay=0.002)
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        assert run_producers(q, ops, threads, per_thread) == []
        rounds = q.fsync_count
        q.close()
    log = ops.log
    ends = {r.id: r.offset + r.size for r in JournalScanner(qdir).records()}
    [path] = {p for kind, p, _ in log if kind == "write"}  # one journal file: no rotation here
    acks = [(at, n) for at, (kind, _, n) in enumerate(log) if kind == "ack"]
    assert len(acks) == threads * per_thread == len(ends)
    started: dict[int, int] = {}  # fsync token -> index of its start
    ended: dict[int, int] = {}
    for at, (kind, p, n) in enumerate(log):
        if kind == "start" and p == path:
            started[n] = at
        elif kind == "end" and p == path:
            ended[n] = at
    writes = [(at, size) for at, (kind, _, size) in enumerate(log) if kind == "write"]
    for ack_at, item_id in acks:
        # the first write that put this record's last byte in the file...
        written_at = next(at for at, size in writes if size >= ends[item_id])
        # ...precedes the start of an fsync that ended before the put returned
        assert any(s > written_at and ended.get(t, len(log)) < ack_at for t, s in started.items()), (
            f"put of id {item_id} returned without an fsync covering its bytes"
        )
    assert rounds <= threads * per_thread / 2  # the fsyncs were shared


def test_a_failing_fsync_fails_every_put_waiting_on_it_and_none_is_acknowledged_after_it(qdir):
    ops = OrderOps(delay=0.002)
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        q.put(b"before")
        ops.fail = OSError(errno.EIO, "Input/output error")
        errors = run_producers(q, ops, 8, 5)
        ops.fail = None  # the disk "recovers": the queue must stay poisoned anyway
        with pytest.raises(JournalIOError, match="reopen"):
            q.put(b"after")
        q.close()
    assert len(errors) == 8 and all(getattr(e, "errno", None) == errno.EIO for e in errors), errors
    assert not [entry for entry in ops.log if entry[0] == "ack"]
