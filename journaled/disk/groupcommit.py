"""Group commit: many threads waiting for durability share one fdatasync.

A leader/follower scheme in batches.  Every append advances a byte sequence number; a caller
that needs its bytes durable calls :meth:`GroupCommit.wait_durable` with the sequence number its
append reached.

* If no fsync is under way the caller becomes the **leader** of the open batch.  Otherwise it
  **joins the open batch** (the one the *next* fsync will cover, never the one in flight, whose
  flush may have missed its bytes) and sleeps on a lock of its own.
* The leader **gathers** or **goes at once**, whichever the producers' recent pace makes faster.
  Every round measures the *regroup* time: from the end of its fsync until half the members it
  released have called again (a thread puts again within microseconds; a client process only after
  its reply crossed the socket and its next request came back).  If that is quicker than an
  fsync, the leader gathers: it waits, for at most three regroup times and one fsync time (half
  the fsync time while none is known) and never over ``GATHER_MAX``, until the open batch has as
  many members as were active at the last fsync (the batch just finished plus the one waiting
  then).
  One batch of everybody then costs one fsync plus one regroup, where two half-size batches, each
  waiting out the other's fsync, would cost two fsyncs.  If regrouping takes longer than an fsync
  (client processes), waiting is the slower choice: the leader syncs at once whatever has
  accumulated, and the producers form **two overlapping batches**, one being fsynced while the
  other's puts (encode, the write to the buffer, the round trip) proceed and queue up for the next
  fsync, which starts the moment this one ends.  A lone producer expects only itself and never
  waits; a producer that went away costs at most one bounded gather, after which the expectation
  shrinks.
* It then closes the batch (later arrivals join a new open one), writes out everything buffered
  (every thread's bytes, not just its own) and fsyncs once, with no lock of this object held.
* When the fsync returns it releases each member of its batch exactly once (no herd contending
  for a shared condition), and each member of the open batch whose bytes this fsync covered too
  (they were written out before the flush although their caller joined after the batch closed),
  and **hands leadership** straight to the open batch's earliest remaining member, so no thread
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

    __slots__ = ("lock", "lead", "seq")

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.lock.acquire()
        self.lead = False
        self.seq = 0  # the sequence number it waits for


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
        self._regroup_s = 0.0  # recent regroup time (moving average; 0: none measured yet)
        self._released_at = 0.0  # when the last round released its members
        self._released = 0  # calls still to come until half of those members are back (0: measured)
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
            if self._released:
                self._released -= 1
                if not self._released:  # half of those the last round released are back
                    self._regrouped(time.monotonic() - self._released_at)
            batch = self._open
            if seq > self._max_seq:
                self._max_seq = seq
            batch.size += 1
            if not self._leading:
                self._leading = True
                self._lead(batch)  # releases the lock
                continue
            me = _Waiter()
            me.seq = seq
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

    def _regrouped(self, took: float) -> None:
        """Record a regroup time (lock held): how long half the members a round released took to
        call again, or at least how long they had taken when the next round ended without them."""
        self._regroup_s = took if not self._regroup_s else (self._regroup_s * 3 + took) / 4

    def _lead(self, batch: _Batch) -> None:
        """Gather (if that pays), flush and fsync for ``batch`` (the open one), then release and
        hand over.  Called with the lock held; releases it before the flush."""
        try:
            fsync_s, regroup_s = self._fsync_s, self._regroup_s
            # gather unless even the median member comes back later than an fsync would end
            if batch.size < self._expect and fsync_s > 0.0 and regroup_s < fsync_s:
                wait = min(3 * regroup_s, fsync_s) if regroup_s else fsync_s / 2
                deadline = time.monotonic() + min(wait, GATHER_MAX)
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
            now = time.monotonic()
            if self._released:  # most of the previous round's members are still away
                self._regrouped(now - self._released_at)
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
            released = batch.size
            nxt = self._open
            self._expect = max(1, batch.size + nxt.size)
            if ok and nxt.waiters and self._max_seq <= self._durable:
                nxt.ok = True  # this fsync covered the open batch too
                for w in nxt.waiters:
                    w.lock.release()
                released += nxt.size
                self._open = nxt = _Batch()
                self._max_seq = 0
            elif ok and nxt.waiters:
                # some of the open batch may have written before the flush but joined after the
                # batch closed: this fsync covered them; released now, not one fsync later (their
                # loop sees ``durable`` past their seq)
                durable, keep = self._durable, []
                for w in nxt.waiters:
                    if w.seq <= durable:
                        w.lock.release()
                        nxt.size -= 1
                        released += 1
                    else:
                        keep.append(w)
                nxt.waiters = keep
            # the regroup time is the median member's: one producer preempted or gone does not
            # make the others look slow
            self._released_at, self._released = now, (released + 1) // 2
            if nxt.waiters:
                first = nxt.waiters.pop(0)
                first.lead = True  # _leading stays True: leadership passes without a gap
                first.lock.release()
            else:
                self._leading = False
