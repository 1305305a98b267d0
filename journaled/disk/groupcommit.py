"""Group commit: many threads waiting for durability share one fdatasync.

A leader/follower scheme.  Every append advances a byte sequence number; a caller that needs its
bytes durable calls :meth:`GroupCommit.wait_durable` with the sequence number its append reached.
If no fsync is under way it becomes the leader: it writes out everything buffered so far (its
own bytes and every other thread's) and fsyncs once.  Callers arriving meanwhile wait on a
condition; when the leader finishes, all of them wake at once, those covered return without a
syscall and one of the others leads the next round, covering everything appended during the
previous fsync.  A failed fsync wakes everyone too: each then tries to lead and gets the
journal's (poisoned) error, so no caller is ever told "durable" on the strength of a failed sync.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


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
        self._cond = threading.Condition(threading.Lock())
        self._leading = False
        self._waiting = 0  # threads inside _cond.wait(), or woken from it and not yet running
        self._durable = 0
        self.fsyncs = 0  # number of fsync rounds actually performed (for tests and stats)

    @property
    def durable(self) -> int:
        """Sequence number up to which all bytes are known durable."""
        return self._durable

    def mark_durable(self, seq: int) -> None:
        """Record that bytes up to ``seq`` became durable by other means (e.g. at rotation)."""
        with self._cond:
            if seq > self._durable:
                self._durable = seq
                self._cond.notify_all()

    def wait_durable(self, seq: int) -> None:
        """Return once bytes up to ``seq`` are durable, fsyncing at most once as leader."""
        if self._durable >= seq:
            return
        with self._cond:
            while self._leading:
                self._waiting += 1
                try:
                    self._cond.wait()
                finally:
                    self._waiting -= 1
                if self._durable >= seq:
                    return  # an earlier leader's fsync covered us
            if self._durable >= seq:
                return
            self._leading = True
            others = self._waiting  # perf: a lone producer has nobody to wait for
        target = 0  # stays 0 unless the fsync succeeded: a failed one proves nothing
        try:
            # Let threads that are runnable right now (typically the ones the previous round
            # just released) append before we flush, so this one fsync covers them too.
            # (perf: only when other threads are about; for a lone producer the yield cost a
            # scheduler round trip per durable put on a busy machine, ~2x slower than raw fsync.)
            if others:
                time.sleep(0)
            written, fsync = self._flush()
            needed = written > self._durable
            fsync(needed)
            if needed:
                self.fsyncs += 1
                target = written
        finally:
            with self._cond:
                self._leading = False
                if target > self._durable:
                    self._durable = target
                self._cond.notify_all()
