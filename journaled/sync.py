"""Group commit: many threads waiting for durability share one fdatasync.

The classic leader/follower scheme.  Every append advances a byte sequence number; a caller that
needs its bytes durable calls :meth:`GroupCommit.wait_durable` with the sequence number its
append reached.  The first caller to get the leader lock writes out everything buffered so far
and fsyncs once; callers that queued behind it usually find their bytes already covered and
return without a syscall.  While a leader is inside fdatasync, new appends keep accumulating, so
the next leader's single fsync covers all of them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable


class GroupCommit:
    """Coordinates fsyncs for one journal.

    ``flush`` is called by the leader; it must write out all buffered bytes and return
    ``(sequence_number_written, fsync_callable)``.  Calling ``fsync_callable`` makes those
    bytes durable (it may raise; the journal poisons itself in that case).
    """

    def __init__(self, flush: Callable[[], tuple[int, Callable[[], None]]]) -> None:
        self._flush = flush
        self._leader = threading.Lock()
        self._durable = 0
        self.fsyncs = 0  # number of fsync rounds actually performed (for tests and stats)

    @property
    def durable(self) -> int:
        """Sequence number up to which all bytes are known durable."""
        return self._durable

    def mark_durable(self, seq: int) -> None:
        """Record that bytes up to ``seq`` became durable by other means (e.g. at rotation)."""
        if seq > self._durable:
            self._durable = seq

    def wait_durable(self, seq: int) -> None:
        """Return once bytes up to ``seq`` are durable, fsyncing at most once as leader."""
        if self._durable >= seq:
            return
        with self._leader:
            if self._durable >= seq:
                return  # an earlier leader's fsync covered us
            target, fsync = self._flush()
            if target > self._durable:
                fsync()
                self.fsyncs += 1
                self.mark_durable(target)
