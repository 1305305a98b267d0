"""One named reader: an independent queue over the shared journal.

State, all guarded by the owning queue's single lock:

* ``head``: every id below it is committed; ``done``: ids at or above it committed out of order.
* ``_mem``: items ready for delivery, in order (aborted items go back to the left end).
* ``_load_id``: when set, items with ids from there on are on disk only (read-behind); they are
  read back from the journal, in order, as ``_mem`` drains.  Memory therefore stays bounded by
  ``max_memory`` however far behind the reader is.
* ``_open``: reads handed out and neither committed nor aborted.
* ``_waiters``: blocked ``get`` calls, served first-come first-served by direct hand-off, so a
  late arrival can never overtake a thread that was already waiting.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol

import attrs

from journaled import aio as _aio
from journaled import policies
from journaled.config import ReaderConfig, Sink
from journaled.errors import Empty, QueueClosed, UnknownRead
from journaled.item import Item, new_item
from journaled.journal import Cursor
from journaled.record import CheckpointData
from journaled.stats import ReaderStats, reader_stats_locked
from journaled.txn import ItemIterator, TransactionContext

if TYPE_CHECKING:
    from journaled.queue import JournaledQueue

log = logging.getLogger("journaled")

#: Most payload bytes one read-behind refill asks the journal for (see _refill_locked).
REFILL_BYTES = 1024 * 1024


class Waiter(Protocol):
    """Something blocked in ``get``: the reader hands it an item, or tells it the queue closed."""

    item: Item | None

    def wake(self) -> None: ...


class _ThreadWaiter:
    __slots__ = ("cond", "item")

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.item: Item | None = None

    def wake(self) -> None:
        self.cond.notify()


class Reader:
    """A named, independent consumer of a :class:`~journaled.JournaledQueue`.

    Obtain one with ``queue.reader(name)``; do not construct directly.
    """

    def __init__(
        self, queue: JournaledQueue, name: str, config: ReaderConfig, state: CheckpointData
    ) -> None:
        self.name = name
        self.config = config
        self._queue = queue
        self._journal = queue._journal
        self._lock = queue._lock
        self.head = state.head
        self.done: set[int] = {i for i in state.done if i >= state.head}
        self._errors: dict[int, int] = dict(state.errors)
        self._open: dict[int, Item] = {}
        self._mem: deque[Item] = deque()
        self._mem_bytes = 0
        self._waiters: deque[Waiter] = deque()
        self._closed = False
        # Everything from the head on is on disk and must be read back.
        self._load_id: int | None = self.head
        if self.head >= self._journal.next_id:
            self._load_id = None  # nothing on disk to read back: new puts go to memory
        self._load_cursor: Cursor | None = None
        if state.file_ms:
            self._load_cursor = Cursor(state.file_ms, state.file_offset, -1)  # hint, verified
        self._dirty = True
        self.delivered = self.committed = self.aborted = 0
        # policy state and counters (journaled/policies.py, journaled/stats.py)
        self.put_count = self.timed_out = self.expired = self.discarded = self.dead_lettered = 0
        self._opened_at: dict[int, float] = {}  # open read -> monotonic time, delivery order
        self._disposing: dict[int, tuple[Item, Sink]] = {}  # bound for a sink, not yet committed
        self._saw_expiry = False  # some item with an expire_at reached this reader
        self._avg_payload = 0  # payload size seen by the last refill (bounds what it decodes)
        self._backlog_bytes = policies.estimate_backlog_bytes(
            queue._journal, state.head, state.file_ms, state.file_offset
        )
        self._backlog_exact = self._backlog_bytes == 0

    # ------------------------------------------------------------------ fed by the queue
    def _on_put_locked(self, items: list[Item], nbytes: int) -> None:
        """New items were appended to the journal (called under the queue lock)."""
        self.put_count += len(items)
        self._backlog_bytes += nbytes
        if items[0].expire_at is not None and not self._saw_expiry:
            self._saw_expiry = True
            self._queue._policy_kick()  # start the expiry sweep
        if self._load_id is None and self._mem_bytes + nbytes <= self.config.max_memory:
            self._mem.extend(items)
            self._mem_bytes += nbytes
        elif self._load_id is None:
            # Switch to read-behind: keep what fits, leave the rest on disk.
            budget = self.config.max_memory - self._mem_bytes
            for k, it in enumerate(items):
                if len(it.data) > budget and (self._mem or k):
                    self._load_id = it.id
                    self._load_cursor = None
                    break
                self._mem.append(it)
                self._mem_bytes += len(it.data)
                budget -= len(it.data)
        if self._waiters:
            try:
                self._hand_off_locked()
            except Exception as exc:
                # The items are in the journal and in this reader's state already: a failed
                # read-behind refill must not fail the put (nor keep them from later readers).
                # The waiters stay in line; the next put, abort or get retries the read.
                log.error("reader %s: handing new items to a waiting get failed: %s", self.name, exc)

    def _refill_locked(self) -> None:
        """Read items back from the journal once memory has drained to half its bound.

        When memory is empty, keep going until an item turns up or the journal ends: one
        window may hold only ids to skip (committed out of order, open, bound for a sink), and
        stopping there would make ``get`` report Empty with items still waiting on disk.
        """
        while True:
            before = self._load_id
            self._refill_once_locked()
            if self._mem or self._load_id is None or self._load_id == before:
                return

    def _refill_once_locked(self) -> None:
        if self._load_id is None or self._mem_bytes > self.config.max_memory // 2:
            return
        journal = self._journal
        if self._load_id >= journal.next_id:
            self._load_id = None  # caught up: new puts go straight to memory again
            self._load_cursor = None
            return
        cursor = self._load_cursor
        if cursor is None or cursor.next_id != self._load_id:
            cursor = journal.locate(self._load_id, hint=cursor)
        room = max(1, self.config.max_memory - self._mem_bytes)
        # Read at most REFILL_BYTES per call (perf): one get never decodes megabytes of small
        # items at once (a latency spike), and refills stay frequent and cheap.
        want = min(room, REFILL_BYTES)
        # Bound the records decoded too, from the sizes seen so far: a chunk of tiny items
        # must not be decoded whole only to keep a few of them (tiny max_memory).
        avg = self._avg_payload
        cap = want + 1 if avg <= 0 else want // avg * 2 + 8
        recs, cursor = journal.read(cursor, max_bytes=want, max_items=cap)
        # read() stays within max_bytes except for one record larger than its read chunk:
        # never hold more than max_memory
        # (one item at least).  The rest is read again next time, from a position hint that
        # locate() verifies (the records may have come from two files).
        total = 0
        for k, rec in enumerate(recs):
            total += len(rec.payload)
            if total > room and k:
                cursor = Cursor(cursor.ms, rec.offset, -1)
                recs = recs[:k]
                break
        if recs:
            self._avg_payload = max(1, total // (len(recs) + 1))
        expected = self._load_id
        for rec in recs:
            if rec.id > expected:
                self._lost_locked(expected, rec.id - 1)
            expected = rec.id + 1
            if rec.id in self.done or rec.id in self._open or rec.id < self.head:
                continue
            if rec.id in self._disposing:
                continue
            if rec.expire_ms:
                self._saw_expiry = True
            item = new_item(  # perf: Item(...) without attrs' __init__
                rec.id,
                rec.payload,
                rec.add_ms / 1000.0,
                rec.expire_ms / 1000.0 if rec.expire_ms else None,
                self._errors.get(rec.id, 0),
            )
            self._mem.append(item)
            self._mem_bytes += len(rec.payload)
        if cursor.next_id > expected and cursor.next_id <= journal.next_id:
            self._lost_locked(expected, cursor.next_id - 1)  # damage skipped at the end
            expected = cursor.next_id
        self._load_id = expected
        self._load_cursor = cursor
        if expected >= journal.next_id:
            self._load_id = None
            self._load_cursor = None

    def _lost_locked(self, first: int, last: int) -> None:
        """Ids ``first..last`` can never be delivered (damaged or archived): treat as committed
        so the head does not wait for them forever."""
        log.warning("reader %s: items %d..%d are lost (journal damage); skipping", self.name, first, last)
        for i in range(max(first, self.head), last + 1):
            self._commit_id_locked(i)

    # ------------------------------------------------------------------ consuming
    def _peek_waiting_locked(self) -> Item | None:
        """The next waiting item (read back from disk if memory is empty), left in place."""
        if not self._mem:
            self._refill_locked()
        return self._mem[0] if self._mem else None

    def _pop_waiting_locked(self) -> Item | None:
        """Remove and return the next waiting item; the caller opens or settles it."""
        if not self._mem:
            self._refill_locked()
            if not self._mem:
                return None
        item = self._mem.popleft()
        self._mem_bytes -= len(item.data)
        if self._load_id is not None and self._mem_bytes <= self.config.max_memory // 2:
            try:
                self._refill_locked()
            except BaseException:
                # a read error must not strand the item already taken: it stays the next one
                self._mem.appendleft(item)
                self._mem_bytes += len(item.data)
                raise
        return item

    def _take_locked(self) -> Item | None:
        while True:
            item = self._pop_waiting_locked()
            if item is None:
                return None
            # expired / too many errors: disposed of, and the next item is considered
            if policies.check_delivery_locked(self, item):
                break
        self._open[item.id] = item
        self.delivered += 1
        policies.note_opened_locked(self, item.id)
        return item

    def _hand_off_locked(self) -> None:
        while self._waiters:
            item = self._take_locked()
            if item is None:
                return
            waiter = self._waiters.popleft()
            waiter.item = item
            waiter.wake()

    def get(self, block: bool = True, timeout: float | None = None) -> Item:
        """Open a read of the next item.

        Blocks until an item is available, ``timeout`` seconds pass (raises :class:`Empty`) or
        the queue closes (raises :class:`QueueClosed`).  ``block=False`` raises ``Empty`` at once
        when nothing is ready.  The item stays open until :meth:`commit` or :meth:`abort`.
        """
        if timeout is not None:
            if not timeout >= 0:  # also refuses NaN, which would never expire
                raise ValueError("'timeout' must be a non-negative number")
            if timeout == math.inf:
                timeout = None
        with self._lock:
            self._check_open()
            if not self._waiters:
                item = self._take_locked()
                if item is not None:
                    return item
            if not block:
                raise Empty
            waiter = _ThreadWaiter(self._lock)
            self._waiters.append(waiter)
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                while waiter.item is None:
                    if self._closed:
                        break
                    if deadline is None:
                        waiter.cond.wait()
                    else:
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        # Condition.wait overflows past TIMEOUT_MAX; the loop re-checks the deadline
                        waiter.cond.wait(min(remaining, threading.TIMEOUT_MAX))
            except BaseException:
                # e.g. KeyboardInterrupt inside wait (the lock is held again): leave the line, and
                # give back uncounted an item handed to us meanwhile, or it would be stranded.
                if waiter.item is not None:
                    self._release_locked(waiter.item.id)
                else:
                    self._waiters.remove(waiter)
                raise
            if waiter.item is not None:
                return waiter.item
            self._waiters.remove(waiter)
            if self._closed:
                raise QueueClosed(f"reader {self.name!r} is closed")
            raise Empty

    def _item_id(self, item: Item | int) -> int:
        return item.id if isinstance(item, Item) else int(item)

    def commit(self, item: Item | int) -> None:
        """Finish an open read: the item is never delivered to this reader again."""
        item_id = self._item_id(item)
        with self._lock:
            # after close the final checkpoint is written: a commit now would be silently lost
            self._check_open()
            it = self._open.pop(item_id, None)
            if it is None:
                raise UnknownRead(f"item {item_id} is not an open read on reader {self.name!r}")
            self._settle_locked(it)
            self.committed += 1

    def _settle_locked(self, item: Item) -> None:
        """``item`` leaves this reader for good (committed, discarded, expired, dead-lettered)."""
        self._errors.pop(item.id, None)
        self._backlog_bytes = max(0, self._backlog_bytes - len(item.data))
        self._commit_id_locked(item.id)

    def _commit_id_locked(self, item_id: int) -> None:
        if item_id == self.head:
            self.head += 1
            done = self.done
            while self.head in done:
                done.remove(self.head)
                self.head += 1
            self._queue._head_moved()
        elif item_id > self.head:
            self.done.add(item_id)
        self._dirty = True

    def abort(self, item: Item | int) -> None:
        """Give an open read back: it returns to the head of this reader, error_count + 1."""
        item_id = self._item_id(item)
        with self._lock:
            self._check_open()
            it = self._open.get(item_id)
            if it is None:
                raise UnknownRead(f"item {item_id} is not an open read on reader {self.name!r}")
            self._abort_locked(it)

    def _abort_locked(self, it: Item) -> None:
        """Close the open read ``it`` as failed: back to the head, or to the dead letters."""
        del self._open[it.id]
        self.aborted += 1
        failed = attrs.evolve(it, error_count=it.error_count + 1)
        cfg = self.config
        if cfg.max_errors is not None and failed.error_count >= cfg.max_errors:
            self._errors[it.id] = failed.error_count  # until the sink has it: survives a crash
            self._dirty = True
            policies.dispose_locked(self, failed, "dead")
        else:
            self._requeue_locked(failed)

    def _requeue_locked(self, item: Item) -> None:
        self._errors[item.id] = item.error_count
        self._mem.appendleft(item)
        self._mem_bytes += len(item.data)
        self._dirty = True
        if self._waiters:
            self._hand_off_locked()

    def _release(self, item: Item | int) -> None:
        """Give an open read back to the head *without* counting an error (a cancelled wait, a
        loop left early): nothing was wrong with the item."""
        item_id = self._item_id(item)
        with self._lock:
            if not self._release_locked(item_id):
                raise UnknownRead(f"item {item_id} is not an open read on reader {self.name!r}")

    def _release_locked(self, item_id: int) -> bool:
        it = self._open.pop(item_id, None)
        if it is None:
            return False
        self._requeue_locked(it)
        return True

    # ------------------------------------------------------------------ scoped reads (txn.py, aio.py)
    def transaction(self, timeout: float | None = None, *, block: bool = True) -> TransactionContext:
        """``with reader.transaction(timeout) as item:`` opens a read on entry (``Empty`` on
        timeout) and on exit commits it, aborts it if an ``Exception`` escaped, or releases it
        uncounted on a ``BaseException`` such as ``KeyboardInterrupt`` (see docs/design.md)."""
        return TransactionContext(self, timeout, block=block)

    def iter(self, timeout: float | None = None) -> ItemIterator:
        """``for item in reader.iter(timeout)``: item *n* is committed when the loop asks for item
        *n + 1* or ends for lack of items; a body that raises or ``break``s gives it back
        (immediately under ``with reader.iter() as items:``).  Stops after ``timeout`` seconds
        without an item (``None``: only when the queue closes)."""
        return ItemIterator(self, timeout)

    async def aget(self, timeout: float | None = None) -> Item:
        """``await reader.aget(timeout)``: :meth:`get` for asyncio, woken by puts (no polling);
        a cancelled ``aget`` never loses or strands an item."""
        return await _aio.aget(self, timeout)

    def atransaction(self, timeout: float | None = None) -> _aio.AsyncTransactionContext:
        """``async with reader.atransaction(timeout) as item:`` -- :meth:`transaction` for asyncio."""
        return _aio.AsyncTransactionContext(self, timeout)

    def aiter(self, timeout: float | None = None) -> _aio.AsyncItemIterator:
        """``async for item in reader.aiter(timeout)`` -- :meth:`iter` for asyncio."""
        return _aio.AsyncItemIterator(self, timeout)

    def __aiter__(self) -> _aio.AsyncItemIterator:
        """``async for item in reader``: :meth:`aiter` without a timeout (ends when the queue
        closes)."""
        return _aio.AsyncItemIterator(self)

    # ------------------------------------------------------------------ state
    def _checkpoint_locked(self) -> CheckpointData:
        ms, offset = self._journal.hint(self.head)
        errors = tuple(sorted((i, c) for i, c in self._errors.items() if i >= self.head and c))
        return CheckpointData(self.head, ms, offset, tuple(sorted(self.done)), errors)

    def _close_locked(self) -> None:
        self._closed = True
        for waiter in self._waiters:
            waiter.wake()

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosed(f"reader {self.name!r} is closed")

    def stats(self) -> ReaderStats:
        """A snapshot of this reader's sizes and counters (no I/O; see :class:`ReaderStats`)."""
        with self._lock:
            return reader_stats_locked(self)

    def __len__(self) -> int:
        """Items waiting for delivery (not counting open reads)."""
        return self.stats().items_waiting

    def __repr__(self) -> str:
        return f"<Reader {self.name!r} head={self.head}>"
