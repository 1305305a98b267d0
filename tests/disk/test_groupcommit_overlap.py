"""Durable writes overlap (issue 37, point 3): under ``sync="always"`` the puts of the next batch
proceed while the current batch's fsync runs, and the next fsync starts as soon as that one ends.

Every interleaving is forced with gates (an fsync that blocks until the test releases it) and,
where the scheme's choice depends on durations, a clock the test moves by hand: no test here
depends on how fast the machine is.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable

from journaled import JournaledQueue, QueueConfig
from journaled.disk import fileio, groupcommit
from journaled.disk.groupcommit import GroupCommit

#: The real clock, whatever a test does to ``time.monotonic``.
NOW = time.perf_counter


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = NOW() + timeout
    while not cond():
        assert NOW() < deadline, f"not reached: {what}"
        time.sleep(0.001)


class GatedJournal:
    """A journal for :class:`GroupCommit`: appends advance a byte count, a flush "writes out"
    everything appended so far.  Fsync number ``k`` (1-based) waits until ``gates[k]`` is set
    (fsyncs without a gate run at once) and advances ``clock`` by ``fsync_s``; ``flush_gate``
    holds the next flush before it takes what it covers."""

    def __init__(self, clock: list[float], fsync_s: float = 0.0) -> None:
        self.lock = threading.Lock()
        self.appended = 0
        self.clock = clock
        self.fsync_s = fsync_s
        self.log: list[tuple[str, int]] = []  # ("start" | "end", bytes covered)
        self.gates: dict[int, threading.Event] = {}
        self.flush_gate: threading.Event | None = None
        self.in_flush = threading.Event()
        self.commits = GroupCommit(self.flush)

    def append(self, n: int = 10) -> int:
        with self.lock:
            self.appended += n
            return self.appended

    def flush(self) -> tuple[int, Callable[[bool], None]]:
        gate, self.flush_gate = self.flush_gate, None
        self.in_flush.set()
        if gate is not None:
            assert gate.wait(30)
        with self.lock:
            target = self.appended

        def fsync(needed: bool) -> None:
            if not needed:
                return
            self.log.append(("start", target))
            gate = self.gates.get(self.starts())
            if gate is not None:
                assert gate.wait(30)
            self.clock[0] += self.fsync_s
            self.log.append(("end", target))

        return target, fsync

    def starts(self) -> int:
        return sum(1 for kind, _ in self.log if kind == "start")

    def put(self, results: dict[str, object], key: str) -> threading.Thread:
        """Append now, then wait for durability in a new thread; what it saw lands in ``results``."""
        seq = self.append()

        def run() -> None:
            self.commits.wait_durable(seq)
            results[key] = (seq, list(self.log))

        th = threading.Thread(target=run, daemon=True, name=key)
        th.start()
        return th


def test_a_caller_whose_bytes_the_fsync_in_flight_covered_returns_with_it_not_one_fsync_later():
    j = GatedJournal([0.0])
    j.flush_gate = flush_gate = threading.Event()
    j.gates[1] = threading.Event()
    j.gates[2] = threading.Event()
    results: dict[str, object] = {}
    leader = j.put(results, "leader")  # leads: its flush waits at flush_gate
    assert j.in_flush.wait(10)
    early = j.put(results, "early")  # written before the flush takes its bytes...
    wait_until(lambda: j.commits.waiting == 1, "early joined the open batch")  # ...but joined late
    flush_gate.set()
    wait_until(lambda: j.starts() == 1, "the first fsync started")
    late = j.put(results, "late")  # written after the flush: the first fsync does not cover it
    wait_until(lambda: j.commits.waiting == 2, "late joined the open batch")
    j.gates[1].set()
    leader.join(10)
    assert not leader.is_alive()
    # the first fsync covered "early": it returns now, while the second fsync is still held
    early.join(10)
    assert not early.is_alive(), f"early is still waiting, for fsync {j.starts()} (log {j.log})"
    seq, log = results["early"]  # type: ignore[misc]
    # what early saw when it returned: the first fsync, ended; the second may have started by then
    # (the leader of the next batch starts it as soon as the first ends), but not ended: it is held
    assert seq == 20 and log[:2] == [("start", 20), ("end", 20)] and log[2:] in ([], [("start", 30)]), log
    assert "late" not in results
    j.gates[2].set()
    late.join(10)
    seq, log = results["late"]  # type: ignore[misc]
    assert seq == 30 and log[-1] == ("end", 30) and log[-2] == ("start", 30)


def test_when_producers_regroup_slower_than_an_fsync_the_next_fsync_starts_at_once_and_overlaps_their_puts(
    monkeypatch,
):
    clock = [0.0]
    monkeypatch.setattr(groupcommit.time, "monotonic", lambda: clock[0])
    j = GatedJournal(clock, fsync_s=0.010)  # every fsync takes 10 ms on this clock
    results: dict[str, object] = {}
    j.put(results, "a1").join(10)  # fsync 1, released at t = 10 ms
    clock[0] += 0.030  # "a" calls again 30 ms later (a client's round trip): slower than an fsync
    j.gates[2] = threading.Event()
    a2 = j.put(results, "a2")  # fsync 2, held
    wait_until(lambda: j.starts() == 2, "fsync 2 started")
    b = j.put(results, "b")
    c = j.put(results, "c")
    wait_until(lambda: j.commits.waiting == 2, "b and c joined the open batch")
    j.gates[3] = threading.Event()
    j.gates[2].set()
    a2.join(10)
    # b leads at once, without waiting for "a" to come back (it takes longer than an fsync)
    wait_until(lambda: j.starts() == 3, "fsync 3 started without waiting for the producer 'a'")
    assert j.log[-1] == ("start", 40)  # b's and c's bytes
    # while fsync 3 runs, the next put proceeds: appended, it joins the batch of fsync 4...
    j.gates[4] = threading.Event()
    a3 = j.put(results, "a3")
    wait_until(lambda: j.commits.waiting == 1, "a3 joined the open batch during fsync 3")
    assert j.appended == 50 and "a3" not in results
    j.gates[3].set()
    b.join(10)
    c.join(10)
    assert ("end", 40) in results["b"][1] and ("end", 40) in results["c"][1]  # type: ignore[index]
    # ...which starts the moment fsync 3 ends, and a3 returns only after it
    wait_until(lambda: j.starts() == 4, "fsync 4 started")
    assert j.log[-1] == ("start", 50) and "a3" not in results
    j.gates[4].set()
    a3.join(10)
    seq, log = results["a3"]  # type: ignore[misc]
    assert seq == 50 and log[-2:] == [("start", 50), ("end", 50)]


def test_when_producers_regroup_faster_than_an_fsync_the_leader_still_gathers_them(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr(groupcommit.time, "monotonic", lambda: clock[0])
    j = GatedJournal(clock, fsync_s=0.010)
    results: dict[str, object] = {}
    j.put(results, "a1").join(10)  # fsync 1, released at t = 10 ms
    clock[0] += 0.001  # "a" calls again after 1 ms: quicker than an fsync
    j.gates[2] = threading.Event()
    a2 = j.put(results, "a2")
    wait_until(lambda: j.starts() == 2, "fsync 2 started")
    b = j.put(results, "b")
    wait_until(lambda: j.commits.waiting == 1, "b joined the open batch")
    j.gates[2].set()
    a2.join(10)
    # b, handed the lead, waits for "a" (the clock stands still: only a's arrival ends the wait)
    time.sleep(0.05)
    assert j.starts() == 2
    a3 = j.put(results, "a3")
    for th in (a3, b):
        th.join(10)
    # one fsync covered both (b's bytes 30, a3's 40)
    assert results["a3"][1][-2:] == results["b"][1][-2:] == [("start", 40), ("end", 40)]  # type: ignore[index]


class HeldSyncs(fileio.FileOps):
    """File operations whose fdatasyncs of journal files (number ``k`` from 1) wait until
    ``gates[k]`` is set; every journal write and fsync start/end is logged with the file's size."""

    def __init__(self) -> None:
        self.gates: dict[int, threading.Event] = {}
        self.log: list[tuple[str, int]] = []
        self.journal_fds: set[int] = set()

    def open(self, path: str, flags: int, mode: int = 0o600) -> int:
        fd = super().open(path, flags, mode)
        if os.path.basename(path).split(".")[-1].isdigit():
            self.journal_fds.add(fd)
        return fd

    def write(self, fd: int, data: bytes | bytearray | memoryview) -> int:
        n = super().write(fd, data)
        if fd in self.journal_fds:
            self.log.append(("write", os.fstat(fd).st_size))
        return n

    def fdatasync(self, fd: int) -> None:
        if fd not in self.journal_fds:
            super().fdatasync(fd)
            return
        size = os.fstat(fd).st_size
        self.log.append(("start", size))
        k = sum(1 for kind, _ in self.log if kind == "start")
        gate = self.gates.get(k)
        if gate is not None:
            assert gate.wait(30)
        super().fdatasync(fd)
        self.log.append(("end", size))

    def starts(self) -> int:
        return sum(1 for kind, _ in self.log if kind == "start")


def test_a_put_made_during_an_fsync_is_appended_and_delivered_at_once_and_returns_after_the_next_fsync(qdir):
    ops = HeldSyncs()
    with fileio.use(ops):
        q = JournaledQueue(qdir, config=QueueConfig(sync="always"), name="q")
        try:
            r = q.reader("r")
            first = ops.starts()  # the syncs of opening
            ops.gates[first + 1] = threading.Event()
            ops.gates[first + 2] = threading.Event()
            done: dict[str, int] = {}

            def put(name: str) -> threading.Thread:
                th = threading.Thread(target=lambda: done.__setitem__(name, q.put(name.encode())))
                th.start()
                return th

            one = put("one")
            wait_until(lambda: ops.starts() == first + 1, "the first put's fsync started")
            two = put("two")
            # while that fsync is held, the second put is appended: a reader already gets it
            assert r.get(timeout=10).data == b"one"
            assert r.get(timeout=10).data == b"two"
            assert "one" not in done and "two" not in done
            ops.gates[first + 1].set()
            one.join(10)
            assert "one" in done
            # the second put's bytes were not in the first fsync: it waits for the next one, which
            # starts once they are written and covers the whole file
            wait_until(lambda: ops.starts() == first + 2, "the second fsync started")
            assert "two" not in done
            covered = ops.log[-1]
            assert covered[0] == "start" and ops.log[-2][0] == "write" and ops.log[-2][1] == covered[1]
            ops.gates[first + 2].set()
            two.join(10)
            assert done["two"] == done["one"] + 1
            assert ops.log[-1] == ("end", covered[1])
        finally:
            for gate in ops.gates.values():
                gate.set()
            q.close()
