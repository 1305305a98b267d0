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
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Protocol

import attrs

from journaled.config import ReaderConfig
from journaled.errors import Empty, QueueClosed, UnknownRead
from journaled.item import Item
from journaled.journal import Cursor
from journaled.record import CheckpointData

if TYPE_CHECKING:
    from journaled.queue import JournaledQueue

log = logging.getLogger("journaled")


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


@attrs.frozen
class ReaderStats:
    """A snapshot of one reader (cheap: computed from counters under the lock)."""

    name: str
    head: int
    items_waiting: int  # not yet delivered or open: in memory plus on disk
    items_in_memory: int
    bytes_in_memory: int
    open_reads: int
    delivered: int
    committed: int
    aborted: int


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
        self._load_cursor: Cursor | None = None
        if state.file_ms:
            self._load_cursor = Cursor(state.file_ms, state.file_offset, -1)  # hint, verified
        self._dirty = True
        self.delivered = self.committed = self.aborted = 0

    # ------------------------------------------------------------------ fed by the queue
    def _on_put_locked(self, items: list[Item], nbytes: int) -> None:
        """New items were appended to the journal (called under the queue lock)."""
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
            self._hand_off_locked()

    def _refill_locked(self) -> None:
        """Read items back from the journal once memory has drained to half its bound."""
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
        budget = max(1, self.config.max_memory - self._mem_bytes)
        recs, cursor = journal.read(cursor, max_bytes=budget)
        expected = self._load_id
        for rec in recs:
            if rec.id > expected:
                self._lost_locked(expected, rec.id - 1)
            expected = rec.id + 1
            if rec.id in self.done or rec.id in self._open or rec.id < self.head:
                continue
            item = Item(
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
    def _take_locked(self) -> Item | None:
        if not self._mem:
            self._refill_locked()
            if not self._mem:
                return None
        item = self._mem.popleft()
        self._mem_bytes -= len(item.data)
        self._open[item.id] = item
        self.delivered += 1
        if self._load_id is not None and self._mem_bytes <= self.config.max_memory // 2:
            self._refill_locked()
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
        if timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
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
            while waiter.item is None:
                if self._closed:
                    break
                if deadline is None:
                    waiter.cond.wait()
                else:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        break
                    waiter.cond.wait(remaining)
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
            if self._open.pop(item_id, None) is None:
                raise UnknownRead(f"item {item_id} is not an open read on reader {self.name!r}")
            self._errors.pop(item_id, None)
            self._commit_id_locked(item_id)
            self.committed += 1

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
            it = self._open.pop(item_id, None)
            if it is None:
                raise UnknownRead(f"item {item_id} is not an open read on reader {self.name!r}")
            self._requeue_locked(attrs.evolve(it, error_count=it.error_count + 1))
            self.aborted += 1

    def _requeue_locked(self, item: Item) -> None:
        self._errors[item.id] = item.error_count
        self._mem.appendleft(item)
        self._mem_bytes += len(item.data)
        self._dirty = True
        if self._waiters:
            self._hand_off_locked()

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
        """Counters and sizes of this reader."""
        with self._lock:
            waiting = self._journal.next_id - self.head - len(self.done) - len(self._open)
            return ReaderStats(
                name=self.name,
                head=self.head,
                items_waiting=waiting,
                items_in_memory=len(self._mem),
                bytes_in_memory=self._mem_bytes,
                open_reads=len(self._open),
                delivered=self.delivered,
                committed=self.committed,
                aborted=self.aborted,
            )

    def __len__(self) -> int:
        """Items waiting for delivery (not counting open reads)."""
        return self.stats().items_waiting

    def __repr__(self) -> str:
        return f"<Reader {self.name!r} head={self.head}>"
