"""A reader's delivery core: the in-memory queue of one named reader and its open reads.

This is libkestrel's ``JournaledQueue`` reader side in one class: which item goes out next, who
holds it, and what is settled.  It knows the journal only through :class:`LogSource` (reading
items back from disk in id order) and the layer above only through two callbacks; it never
touches files, checkpoints or threads.

Locking protocol (the one rule of this module)
----------------------------------------------
Every attribute and every method of :class:`ReaderCore` is guarded by ``core.lock``, which is the
owning queue's single lock (shared by all readers of that queue, so a put reaches every reader
atomically).  Callers hold it; nothing here takes it, waits on it, or runs user code under it.

The protocol the upper layers use (``reader.py``, ``core/policies.py``, ``stats.py``, ``aio.py``,
``txn.py`` and the queue):

``on_put(items, nbytes)``  new items were appended to the journal, in id order.
``take()``                 the next deliverable item, recorded as an open read (or ``None``).
``open_read(item)``        the open read a consumer names; raises :class:`UnknownRead` unless it
                           is *this delivery* (an :class:`Item` is matched by identity).
``commit(item)``           an open read finished: settled for good.
``abort(item, delay)``     an open read failed: back to the head with ``error_count + 1``, after
                           a delay (parked, core/retry.py), or to the dead letters at ``max_errors``.
``reject(item, reason)``   an open read refused for good: to the dead letters, no retry.
``release(item)``          an open read given back without blame (a cancelled wait).
                           These four check the read with ``open_read`` first.
``settle(item)``           an item leaves this reader for good (committed, expired, discarded).
``requeue(item)``          an item goes back to the head and is offered to waiters.
``join(waiter)`` / ``leave(waiter)``  the FIFO line of blocked ``get`` calls.
``checkpoint_state()``     the durable state to write; ``close()`` wakes every waiter.

A read is identified by its delivery, not by its item id: every time an item is handed out it is
a distinct :class:`Item` object (an aborted or released item is re-created before it goes back),
so a consumer whose read was taken away (``open_read_timeout``) can never settle the read the
item's next consumer holds.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable
from typing import Protocol

from journaled.config import ReaderConfig, Sink
from journaled.core import policies, retry
from journaled.deadletter import DeadLetter
from journaled.errors import QueueClosed, UnknownRead
from journaled.format.record import Put
from journaled.format.smallfiles import CheckpointData
from journaled.item import Item, items_from_puts, read_id
from journaled.log.journal import Cursor

log = logging.getLogger("journaled")

#: Most bytes (payload + ITEM_OVERHEAD each) one read-behind refill brings into memory, so it
#: decodes at most REFILL_BYTES // ITEM_OVERHEAD records (ReaderCore._refill_once).
REFILL_BYTES = 1024 * 1024
#: What ``max_memory`` charges per item in memory besides its payload: the Item, its id and time
#: objects, the bytes header and the deque slot (~145-175 bytes on CPython 3.11, rounded up).
ITEM_OVERHEAD = 200


class LogSource(Protocol):
    """What a reader core needs from the journal (``journaled.log.journal.Journal`` is one)."""

    @property
    def next_id(self) -> int: ...
    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor: ...
    def read(
        self, cursor: Cursor, max_bytes: int = ..., max_items: int = ...
    ) -> tuple[list[Put], Cursor]: ...
    def hint(self, item_id: int) -> tuple[int, int]: ...
    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int: ...
    def file_created_s(self, item_id: int) -> float: ...
    def first_id(self) -> int: ...
    def locate_time(self, ms: int) -> int: ...


class Waiter(Protocol):
    """Something blocked in ``get``: the core hands it an item, or tells it the queue closed."""

    item: Item | None

    def wake(self) -> None: ...


class ThreadWaiter:
    """A thread blocked in ``Reader.get`` (its condition shares the core's lock)."""

    __slots__ = ("cond", "item")

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.item: Item | None = None

    def wake(self) -> None:
        self.cond.notify()


class ReaderCore:
    """The delivery state of one named reader (see the module docstring for the protocol).

    Attributes (all guarded by ``lock``):
        head: every id below it is committed.
        done: ids at or above ``head`` committed out of order.
        errors: abort counts of uncommitted items.
        mem: items ready for delivery, in order (aborted items go back to the left end).
        mem_bytes: payload bytes in ``mem`` (``max_memory`` also charges ``ITEM_OVERHEAD`` per
            item: :meth:`charged`).
        load_id: when set, items with ids from there on are on disk only (read-behind) and are
            read back, in order, as ``mem`` drains; memory stays bounded by ``max_memory``.
        open: open reads by id (the value is the delivery handed out).
        waiters: blocked ``get`` calls, served first-come first-served by direct hand-off.
        opened_at: open read id -> ``time.monotonic()`` of delivery, in delivery order
            (``open_read_timeout``).
        disposing: items bound for an expiry / dead-letter sink, not yet committed.
        parked / due: aborted items waiting out a delay, and their due times (core/retry.py).
        saw_expiry: some item with an ``expire_at`` reached this reader.
        backlog_bytes / backlog_exact: payload bytes of uncommitted items (see core/policies.py).
        dirty: state changed since the last checkpoint.
        closed: the queue closed or the reader was removed.
    """

    def __init__(
        self,
        name: str,
        config: ReaderConfig,
        state: CheckpointData,
        lock: threading.Lock,
        journal: LogSource,
        head_moved: Callable[[], None],
        wake_engine: Callable[[], None],
    ) -> None:
        self.name = name
        self.config = config
        self.lock = lock
        self.journal = journal
        # Upward calls, made with the lock held; both only set a flag or an event.
        self.head_moved = head_moved  # archiving may have become possible
        self.wake_engine = wake_engine  # the background thread has policy or sink work
        self.head = state.head
        self.done: set[int] = {i for i in state.done if i >= state.head}
        self.errors: dict[int, int] = dict(state.errors)
        self.open: dict[int, Item] = {}
        self.mem: deque[Item] = deque()
        self.mem_bytes = 0
        self.waiters: deque[Waiter] = deque()
        self.closed = False
        # Everything from the head on is on disk and must be read back.
        self.load_id: int | None = self.head if self.head < journal.next_id else None
        self.load_cursor: Cursor | None = None
        if state.file_ms:
            self.load_cursor = Cursor(state.file_ms, state.file_offset, -1)  # hint, verified
        self.dirty = True
        self.delivered = self.committed = self.aborted = 0
        self.put_count = self.timed_out = self.expired = self.discarded = self.dead_lettered = 0
        self.rejected = 0
        self.opened_at: dict[int, float] = {}
        self.disposing: dict[int, tuple[DeadLetter, Sink]] = {}
        self.parked: dict[int, Item] = {}
        self.due: list[tuple[float, int]] = []  # a heap of (monotonic due time, id)
        self.saw_expiry = False
        self._avg_payload = 0  # payload size seen by the last refill (bounds what it decodes)
        self.backlog_bytes = policies.estimate_backlog_bytes(
            journal, state.head, state.file_ms, state.file_offset
        )
        self.backlog_exact = self.backlog_bytes == 0

    # ------------------------------------------------------------------ fed by the queue
    def on_put(self, items: list[Item], nbytes: int) -> None:
        """New items were appended to the journal (ids in order, ``nbytes`` of payload)."""
        self.put_count += len(items)
        self.backlog_bytes += nbytes
        if items[0].expire_at is not None and not self.saw_expiry:
            self.saw_expiry = True
            self.wake_engine()  # start the expiry sweep
        mem = self.mem
        if self.load_id is None and (
            self.mem_bytes + nbytes + (len(mem) + len(items)) * ITEM_OVERHEAD <= self.config.max_memory
        ):
            mem.extend(items)
            self.mem_bytes += nbytes
        elif self.load_id is None:
            # Switch to read-behind: keep what fits, leave the rest on disk.
            budget = self.config.max_memory - self.charged()
            for k, it in enumerate(items):
                cost = len(it.data) + ITEM_OVERHEAD
                if cost > budget and (mem or k):
                    self.load_id = it.id
                    self.load_cursor = None
                    break
                mem.append(it)
                self.mem_bytes += len(it.data)
                budget -= cost
        if self.waiters:
            try:
                self.hand_off()
            except Exception as exc:
                # The items are in the journal and in this reader's state already: a failed
                # read-behind refill must not fail the put (nor keep them from later readers).
                # The waiters stay in line; the next put, abort or get retries the read.
                log.error("reader %s: handing new items to a waiting get failed: %s", self.name, exc)

    def charged(self) -> int:
        """What the items in memory count against ``max_memory`` (``ITEM_OVERHEAD`` each)."""
        return self.mem_bytes + len(self.mem) * ITEM_OVERHEAD

    def _refill(self) -> None:
        """Read items back from the journal once memory has drained to half its bound.

        When memory is empty, keep going until an item turns up or the journal ends: one
        window may hold only ids to skip (committed out of order, open, bound for a sink), and
        stopping there would make ``get`` report Empty with items still waiting on disk.
        """
        while True:
            before = self.load_id
            self._refill_once()
            if self.mem or self.load_id is None or self.load_id == before:
                return

    def _refill_once(self) -> None:
        if self.load_id is None or self.charged() > self.config.max_memory // 2:
            return
        journal = self.journal
        if self.load_id >= journal.next_id:
            self.load_id = None  # caught up: new puts go straight to memory again
            self.load_cursor = None
            return
        cursor = self.load_cursor
        if cursor is None or cursor.next_id != self.load_id:
            cursor = journal.locate(self.load_id, hint=cursor)
        # At most REFILL_BYTES per call, so one get never decodes megabytes (or a million tiny
        # records) under the queue lock.  `cap` records with at most `want - cap * ITEM_OVERHEAD`
        # of payload always fit, so nothing decoded is dropped (perf); the cap comes from the
        # sizes seen so far, and a wrong guess only makes one refill small.
        want = min(max(1, self.config.max_memory - self.charged()), REFILL_BYTES)
        cap = max(1, want // (self._avg_payload + ITEM_OVERHEAD))
        recs, cursor = journal.read(cursor, max_bytes=max(1, want - cap * ITEM_OVERHEAD), max_items=cap)
        # Only a single record larger than a read chunk passes that: keep one item at least, and
        # read the rest again next time, from a position hint that locate() verifies.
        items, total, expiring = items_from_puts(recs, self.errors, want, ITEM_OVERHEAD)
        n = len(items)
        if n < len(recs):
            cursor = Cursor(cursor.ms, recs[n].offset, -1)
        if n:
            self._avg_payload = total // n - ITEM_OVERHEAD
        expected = self.load_id
        if (
            n
            and items[0].id == expected >= self.head
            and items[-1].id == expected + n - 1
            and not (self.done or self.disposing or self.parked)
            and all(i < expected for i in self.open)
        ):
            # perf: consecutive ids, none to skip: every item goes to memory as it is
            self.mem.extend(items)
            self.mem_bytes += total - n * ITEM_OVERHEAD
            self.saw_expiry = self.saw_expiry or expiring
            items, expected = [], expected + n
        for item in items:
            if item.id > expected:
                self._lost(expected, item.id - 1)
            expected = item.id + 1
            if item.id in self.done or item.id in self.open or item.id < self.head:
                continue
            if item.id in self.disposing or item.id in self.parked:
                continue
            if item.expire_at is not None:
                self.saw_expiry = True
            self.mem.append(item)
            self.mem_bytes += len(item.data)
        if cursor.next_id > expected and cursor.next_id <= journal.next_id:
            self._lost(expected, cursor.next_id - 1)  # damage skipped at the end
            expected = cursor.next_id
        self.load_id = expected
        self.load_cursor = cursor
        if expected >= journal.next_id:
            self.load_id = None
            self.load_cursor = None

    def _lost(self, first: int, last: int) -> None:
        """Ids ``first..last`` can never be delivered (damaged or archived): treat as committed
        so the head does not wait for them forever."""
        log.warning("reader %s: items %d..%d are lost (journal damage); skipping", self.name, first, last)
        for i in range(max(first, self.head), last + 1):
            self._commit_id(i)

    # ------------------------------------------------------------------ delivery
    def peek_waiting(self) -> Item | None:
        """The next waiting item (read back from disk if memory is empty), left in place."""
        if not self.mem:
            self._refill()
        return self.mem[0] if self.mem else None

    def pop_waiting(self) -> Item | None:
        """Remove and return the next waiting item; the caller opens or settles it."""
        if not self.mem:
            self._refill()
            if not self.mem:
                return None
        item = self.mem.popleft()
        self.mem_bytes -= len(item.data)
        if self.load_id is not None and self.charged() <= self.config.max_memory // 2:
            try:
                self._refill()
            except BaseException:
                # a read error must not strand the item already taken: it stays the next one
                self.mem.appendleft(item)
                self.mem_bytes += len(item.data)
                raise
        return item

    def take(self) -> Item | None:
        """The next deliverable item, now an open read; ``None`` when nothing waits.  Expired
        and dead items met on the way are disposed of (policies.check_delivery)."""
        if self.parked:
            retry.release_due(self, serve=False)
        while True:
            item = self.pop_waiting()
            if item is None:
                return None
            if policies.check_delivery(self, item):
                break
        self.open[item.id] = item
        self.delivered += 1
        if self.config.open_read_timeout is not None:
            policies.note_opened(self, item.id)
        return item

    def take_if_first(self) -> Item | None:
        """:meth:`take`, unless blocked ``get`` calls are already in line (they go first)."""
        if self.waiters:
            return None
        return self.take()

    def hand_off(self) -> None:
        """Give waiting items to blocked ``get`` calls, first come first served."""
        while self.waiters:
            item = self.take()
            if item is None:
                return
            waiter = self.waiters.popleft()
            waiter.item = item
            waiter.wake()

    def join(self, waiter: Waiter) -> None:
        """Put a blocked ``get`` at the end of the line."""
        self.waiters.append(waiter)

    def leave(self, waiter: Waiter) -> None:
        """Take a blocked ``get`` out of the line (timed out, cancelled); no-op if gone."""
        try:
            self.waiters.remove(waiter)
        except ValueError:
            pass

    # ------------------------------------------------------------------ settling
    def open_read(self, item: Item | int) -> Item:
        """The open read ``item`` names.  An :class:`Item` must be the very object this reader
        handed out for its current delivery; a bare id names whatever read of it is open."""
        if isinstance(item, Item):
            current = self.open.get(item.id)
            if current is not item:
                raise UnknownRead(
                    f"item {item.id} is not an open read on reader {self.name!r}"
                    + (" (it was given back and delivered again)" if current is not None else "")
                )
            return current
        current = self.open.get(item_id := read_id(item))
        if current is None:
            raise UnknownRead(f"item {item_id} is not an open read on reader {self.name!r}")
        return current

    def commit(self, item: Item | int) -> None:
        """Finish the open read ``item`` names (see :meth:`open_read`): settled for good."""
        # perf: the common case (the Item handed out, still open) without open_read's call
        current = self.open.get(item.id) if type(item) is Item else None
        if current is None or current is not item:
            current = self.open_read(item)
        del self.open[current.id]
        self.settle(current)
        self.committed += 1

    def settle(self, item: Item) -> None:
        """``item`` leaves this reader for good (committed, discarded, expired, dead-lettered)."""
        self.errors.pop(item.id, None)
        self.backlog_bytes = max(0, self.backlog_bytes - len(item.data))
        self._commit_id(item.id)

    def _commit_id(self, item_id: int) -> None:
        if item_id == self.head:
            self.head += 1
            done = self.done
            while self.head in done:
                done.remove(self.head)
                self.head += 1
            self.head_moved()
        elif item_id > self.head:
            self.done.add(item_id)
        self.dirty = True

    def abort(self, item: Item | int, delay: float | None = None) -> None:
        """Close the open read ``item`` names as failed (:func:`journaled.core.retry.abort`)."""
        retry.abort(self, item, delay)

    def reject(self, item: Item | int, reason: str = "") -> None:
        """Close the open read ``item`` names for good (:func:`journaled.core.retry.reject`)."""
        retry.reject(self, item, reason)

    def release(self, item: Item | int) -> None:
        """Give the open read ``item`` names back to the head without counting an error."""
        retry.release(self, item)

    def release_id(self, item_id: int) -> bool:
        """:meth:`release` by id, for hand-offs nobody received; False if not open."""
        item = self.open.get(item_id)
        if item is None:
            return False
        self.release(item)
        return True

    def release_due(self, now: float | None = None) -> int:
        """Parked items whose time has come go back to the head (:func:`retry.release_due`)."""
        return retry.release_due(self, now)

    def requeue(self, item: Item) -> None:
        """Put ``item`` back at the head (it is the next one delivered) and serve waiters."""
        retry.requeue(self, item)

    # ------------------------------------------------------------------ state
    def checkpoint_state(self) -> CheckpointData:
        """What this reader's checkpoint file should say now."""
        ms, offset = self.journal.hint(self.head)
        errors = tuple(sorted((i, c) for i, c in self.errors.items() if i >= self.head and c))
        return CheckpointData(self.head, ms, offset, tuple(sorted(self.done)), errors)

    def reconfigure(self, config: ReaderConfig) -> None:
        """Apply new policies from now on (what is in memory and open stays where it is)."""
        self.config = config

    def close(self) -> None:
        """No more deliveries: wake every blocked ``get`` (they raise ``QueueClosed``)."""
        self.closed = True
        for waiter in self.waiters:
            waiter.wake()

    def check_open(self) -> None:
        if self.closed:
            raise QueueClosed(f"reader {self.name!r} is closed")
