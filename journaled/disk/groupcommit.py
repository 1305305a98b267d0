"""Group commit: many threads waiting for durability share one fdatasync.

A leader/follower scheme in batches.  Every append advances a byte sequence number; a caller
that needs its bytes durable calls :meth:`GroupCommit.wait_durable` with the sequence number its
append reached.

* If no fsync is under way the caller becomes the **leader** of the open batch.  Otherwise it
  **joins the open batch** (the one the *next* fsync will cover, never the one in flight, whose
  flush may have missed its bytes) and sleeps on a lock of its own.
* The leader first **gathers**: it waits, for at most half the recent fsync time, until the open
  batch has as many members as were active at the last fsync (the batch just finished plus the
  one that was waiting then).  Threads released by the previous fsync typically put again within
  microseconds; without the gather they would just miss this flush and wait almost two fsyncs,
  splitting the producers into two half-size batches.  A lone producer expects only itself and
  never waits; a producer that went away costs at most one bounded gather, after which the
  expectation shrinks.
* It then closes the batch (later arrivals join a new open one), writes out everything buffered
  (every thread's bytes, not just its own) and fsyncs once, with no lock of this object held.
* When the fsync returns it releases each member of its batch exactly once (no herd contending
  for a shared condition), also completes the open batch if the same fsync happened to cover it,
  and otherwise **hands leadership** straight to the open batch's earliest member, so no thread
  has to wake up merely to find out whether it should lead.

A failed fsync (or flush) proves nothing: the members of that batch are released without being
told "durable" and each tries again, as leader or member of a later batch; a poisoned journal
makes every such attempt raise (the flush checks it), so every caller of the failed batch gets an
error and none is ever told "durable" on the strength of a failed sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

#: The gather never waits longer than this, however slow the disk (seconds).
GATHER_MAX = 0.002


class _Waiter:
    """One member of a batch: a lock it sleeps on (released once) and whether it should lead."""

    __slots__ = ("lock", "lead")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False


class _Batch:
    """The callers one fsync is meant to cover."""

    __slots__ = ("waiters", "size", "ok")

    def __init__(self) -> None:
        self.waiters: list[_Waiter] = []  # members asleep, earliest first
        self.size = 0  # members, the leader included
        self.ok = False  # set before the members are released: the fsync covered them all


class GroupCommit:
    """Coordinates fsyncs for one journal.

    ``flush`` is called by the leader, never under this object's lock; it must write out all
    buffered bytes and return ``(sequence_number_written, fsync_callable)``.  The leader calls
    ``fsync_callable(needed)`` exactly once: with ``needed=True`` it makes those bytes durable
    (it may raise; the journal poisons itself then); with ``False`` (they already are) it only
    releases what it holds.
    """

    def __init__(self, flush: Callable[[], tuple[int, Callable[[bool], None]]]) -> None:
        self._flush = flush
        self._lock = threading.Lock()
        self._gathered = threading.Condition(self._lock)  # the gathering leader sleeps here
        self._leading = False  # a leader exists (gathering, flushing, or handed over to)
        self._open = _Batch()  # the batch the next fsync covers
        self._max_seq = 0  # the highest sequence number waiting in the open batch
        self._expect = 1  # members the gather waits for
        self._fsync_s = 0.0  # recent fsync duration (moving average)
        self._durable = 0
        self.fsyncs = 0  # number of fsync rounds actually performed (for tests and stats)
        self.batched = 0  # callers covered by those rounds (batched / fsyncs = puts per fsync)

    @property
    def durable(self) -> int:
        """Sequence number up to which all bytes are known durable."""
        return self._durable

    @property
    def waiting(self) -> int:
        """Callers in the open batch: they wait for the next fsync, not the one in flight."""
        return self._open.size

    def mark_durable(self, seq: int) -> None:
        """Record that bytes up to ``seq`` became durable by other means (e.g. at rotation).
        Members of the open batch it covers return when the next leader finds nothing to sync."""
        with self._lock:
            if seq > self._durable:
                self._durable = seq

    def wait_durable(self, seq: int) -> None:
        """Return once bytes up to ``seq`` are durable, fsyncing at most once per round as leader."""
        while self._durable < seq:
            self._lock.acquire()
            if self._durable >= seq:
                self._lock.release()
                return
            batch = self._open
            if seq > self._max_seq:
                self._max_seq = seq
            batch.size += 1
            if not self._leading:
                self._leading = True
                self._lead(batch)  # releases the lock
                continue
            me = _Waiter()
            batch.waiters.append(me)
            if batch.size >= self._expect:
                self._gathered.notify()
            self._lock.release()
            try:
                me.lock.acquire()
            except BaseException:
                self._abandon(batch, me)
                raise
            if me.lead:
                self._lock.acquire()
                self._lead(batch)
            # else released: batch.ok means covered (the loop test sees it); a failed round
            # leaves durable short of seq and we try again

    def _abandon(self, batch: _Batch, me: _Waiter) -> None:
        """A member interrupted in its sleep: pass on leadership if it was just handed it."""
        with self._lock:
            if me in batch.waiters:
                batch.waiters.remove(me)
                batch.size -= 1
                return
        if me.lead:
            # our bytes may stay unsynced, but the batch must not be left without a leader
            self._lock.acquire()
            self._lead(batch)

    def _lead(self, batch: _Batch) -> None:
        """Gather, flush and fsync for ``batch`` (the open one), then release and hand over.
        Called with the lock held; releases it before the flush."""
        try:
            if batch.size < self._expect and self._fsync_s > 0.0:
                deadline = time.monotonic() + min(self._fsync_s / 2, GATHER_MAX)
                while batch.size < self._expect:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        break
                    self._gathered.wait(left)
            self._open = _Batch()  # closed: later arrivals wait for the next round
            self._max_seq = 0
        finally:
            self._lock.release()
        ok = False  # stays False unless the sync succeeded: a failed one proves nothing
        needed = False
        written = 0
        took = 0.0
        try:
            written, fsync = self._flush()
            needed = written > self._durable
            t0 = time.monotonic()
            fsync(needed)
            took = time.monotonic() - t0
            ok = True
        finally:
            self._finish(batch, ok, needed, written, took)

    def _finish(self, batch: _Batch, ok: bool, synced: bool, written: int, took: float) -> None:
        with self._lock:
            if ok:
                if synced:
                    self.fsyncs += 1
                    self.batched += batch.size
                    self._fsync_s = took if not self._fsync_s else (self._fsync_s * 3 + took) / 4
                if written > self._durable:
                    self._durable = written
            batch.ok = ok
            for w in batch.waiters:
                w.lock.release()
            nxt = self._open
            self._expect = max(1, batch.size + nxt.size)
            if ok and nxt.waiters and self._max_seq <= self._durable:
                nxt.ok = True  # this fsync covered the open batch too
                for w in nxt.waiters:
                    w.lock.release()
                self._open = nxt = _Batch()
                self._max_seq = 0
            if nxt.waiters:
                first = nxt.waiters.pop(0)
                first.lead = True  # _leading stays True: leadership passes without a gap
                first.lock.release()
            else:
                self._leading = False
