"""``Reader``: the public face of one named reader of a :class:`~journaled.JournaledQueue`.

The state and the delivery rules live in :class:`~journaled.core.readercore.ReaderCore`; this class
adds the blocking ``get``, the commit/abort/release calls consumers make, and the scoped forms
(transactions, loops, asyncio) from txn.py and aio.py.  Every method takes the queue lock
(``core.lock``) itself, briefly; none is called with it held.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Awaitable, Callable, Iterable

from journaled import aio as _aio
from journaled import txn
from journaled.config import ReaderConfig, Start
from journaled.core import calls, retry, seek
from journaled.core.readercore import ReaderCore
from journaled.errors import Empty, UnknownRead
from journaled.item import Item, read_id
from journaled.owner import closing
from journaled.owner.readerfiles import ReaderFiles
from journaled.stats import ReaderStats, reader_stats
from journaled.txn import ItemIterator, TransactionContext


class ThreadWaiter:
    """A thread blocked in :meth:`Reader.get`, in its core's line of waiters (a
    :class:`~journaled.core.waiters.Waiter`); its condition shares the core's lock."""

    __slots__ = ("cond", "item")

    def __init__(self, lock: threading.Lock) -> None:
        self.cond = threading.Condition(lock)
        self.item: Item | None = None

    def deliver(self, item: Item) -> None:
        self.item = item
        self.cond.notify()

    def wake(self) -> None:
        self.cond.notify()


class Reader:
    """A named, independent consumer of a :class:`~journaled.JournaledQueue`.

    Obtain one with ``queue.reader(name)``; do not construct directly.

    ``core`` is the reader's delivery state (:class:`~journaled.core.readercore.ReaderCore`), for tools
    and tests that need to look inside; read it only while holding ``core.lock``.
    """

    def __init__(self, core: ReaderCore, files: ReaderFiles | None = None) -> None:
        self.core = core
        self.name = core.name
        self._files = files  # the queue's checkpoint files (seek lowers the archiving head)

    @property
    def config(self) -> ReaderConfig:
        """The reader's policies (set through ``queue.reader(name, config)``)."""
        return self.core.config

    @property
    def head(self) -> int:
        """Every id below this one is committed."""
        with self.core.lock:
            return self.core.head

    @property
    def done(self) -> set[int]:
        """Ids at or above :attr:`head` committed out of order (a copy)."""
        with self.core.lock:
            return set(self.core.done)

    # ------------------------------------------------------------------ consuming
    def get(self, block: bool = True, timeout: float | None = None) -> Item:
        """Open a read of the next item.

        Blocks until an item is available, ``timeout`` seconds pass (raises :class:`Empty`) or
        the queue closes (raises :class:`QueueClosed`).  ``block=False`` raises ``Empty`` at once
        when nothing is ready.  The item stays open until :meth:`commit`, :meth:`abort` or
        :meth:`release`; the :class:`Item` returned is the handle of this delivery.
        """
        if timeout is not None:
            if not timeout >= 0:  # also refuses NaN, which would never expire
                raise ValueError("'timeout' must be a non-negative number")
            if timeout == math.inf:
                timeout = None
        core = self.core
        got = calls.take_now(core)  # perf: the common case in one compiled call
        if not isinstance(got, int):
            return got
        if got == calls.EMPTY and not block:
            raise Empty  # that hold's answer (calls.take_now says why not to look again)
        with core.lock:
            if core.closed:
                raise closing.reader_closed(core)
            if not core.waiters:  # an item may have come since
                item = core.take()
                if item is not None:
                    return item
            if not block:
                raise Empty
            waiter = ThreadWaiter(core.lock)
            core.join(waiter)
            deadline = None if timeout is None else time.monotonic() + timeout
            try:
                while waiter.item is None:
                    if core.closed:
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
                    core.release_id(waiter.item.id)
                else:
                    core.leave(waiter)
                raise
            if waiter.item is not None:
                return waiter.item
            core.leave(waiter)
            if core.closed:
                raise closing.reader_closed(core)
            raise Empty

    def get_many(self, max_items: int, timeout: float | None = None, *, block: bool = True) -> list[Item]:
        """Open up to ``max_items`` reads at once, for batch consumers: waits like :meth:`get`
        for the first (``Empty`` if none comes), then takes what else is ready now.  Each
        item is an open read of its own (commit or abort each)."""
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise ValueError(f"max_items must be a positive int, got {max_items!r}")
        items = [self.get(block, timeout)]
        core = self.core
        with core.lock:
            while len(items) < max_items and not core.closed:
                item = core.take_if_first()  # blocked gets in line go first
                if item is None:
                    break
                items.append(item)
        return items

    def seek(self, position: Start) -> int:
        """Move this reader to ``position``, with the rules of ``ReaderConfig.start``:
        ``"earliest"``, ``"latest"``, an item id, or a point in time (epoch seconds or a
        ``datetime``).  Everything from there on is delivered again (or skipped), as for a new
        reader placed there; open reads are taken back first (committing one raises
        :class:`UnknownRead`), error counts and delays are forgotten.  Returns the new head;
        durable at the next checkpoint (``q.checkpoint()``)."""
        core = self.core
        files = self._files
        if files is None:
            raise TypeError("this reader has no queue to seek in")
        with files.lock:  # archiving must not delete what a head moved back needs
            with core.lock:
                if core.closed:
                    raise closing.reader_closed(core)
                head = seek.seek(core, position)
                files.head_moved_back(self.name, head)
        return head

    def commit(self, item: Item | int) -> None:
        """Finish an open read: the item is never delivered to this reader again.

        Pass the :class:`Item` that ``get`` returned: a read that was taken away meanwhile (by
        ``open_read_timeout``) raises :class:`UnknownRead` even though the same item id may be
        open again for another consumer.  A bare id settles whichever read of it is open.
        Anything else (``1.5``, ``"1"``, ``True``) raises ``TypeError``; so for abort and release.
        """
        # after close the final checkpoint is written: a commit now would be silently lost
        if not calls.commit_now(self.core, item):
            raise closing.reader_closed(self.core)

    def commit_many(self, items: Iterable[Item | int]) -> None:
        """:meth:`commit` each of ``items`` (what :meth:`get_many` returned, say) under one lock
        acquisition, and in a client process with one request.  Every item that is an open read
        is committed even if some are not; those raise one :class:`UnknownRead` at the end,
        naming their ids.  Anything that is neither an :class:`Item` nor an int raises
        ``TypeError`` before anything is committed."""
        batch = list(items)
        for item in batch:
            if not isinstance(item, Item):
                read_id(item)  # TypeError for 1.5, "1", True
        core = self.core
        unknown: list[int] = []
        with core.lock:
            if core.closed:
                raise closing.reader_closed(core)
            for item in batch:
                try:
                    core.commit(item)
                except UnknownRead:
                    unknown.append(item.id if isinstance(item, Item) else int(item))
        if unknown:
            raise UnknownRead(
                f"not open reads on reader {self.name!r} (the others were committed): {unknown}"
            )

    def abort(self, item: Item | int, delay: float | None = None) -> None:
        """Give an open read back: it returns to the head of this reader, error_count + 1
        (or goes to ``dead_letter`` once ``max_errors`` is reached).

        ``delay``: seconds before it is delivered again (``None``: the reader's
        ``retry_delay`` backoff, at once without one), never less than the built-in floor for
        its error count (:func:`journaled.core.retry.floor`: none for its first 3 failures, then
        0.05 s doubling up to 1 s), so an item aborted again and again is retried at a bounded
        rate.  Meanwhile the items behind it are delivered; the delay is in memory only (after a
        crash it is delivered at once).
        """
        wait = retry.check_delay(delay)
        core = self.core
        with core.lock:
            if core.closed:
                raise closing.reader_closed(core)
            core.abort(item, wait)

    def reject(self, item: Item | int, reason: str = "") -> None:
        """Give up on an open read for good, without a retry: it goes to ``dead_letter`` as a
        :class:`~journaled.DeadLetter` with ``kind="rejected"`` and ``reason`` (dropped when
        there is no ``dead_letter``; counted as ``rejected`` either way).  Does not count
        towards ``max_errors``."""
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__}")
        core = self.core
        with core.lock:
            if core.closed:
                raise closing.reader_closed(core)
            core.reject(item, reason)

    def release(self, item: Item | int) -> None:
        """Give an open read back to the head *without* counting an error (a cancelled wait,
        a loop left early): nothing was wrong with the item.  Reads given back stack up at the
        head (the last one given back is delivered first): give several back newest first to
        keep their order."""
        core = self.core
        with core.lock:
            core.release(item)

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

    def process(
        self,
        fn: Callable[[Item], object],
        timeout: float | None = None,
        *,
        on_error: Callable[[Item, Exception], object] | None = None,
    ) -> int:
        """A worker loop that keeps going: ``fn(item)`` for each item; commit when it returns,
        abort (``retry_delay`` backoff, ``max_errors``) when it raises an ``Exception``, which
        is logged (or passed to ``on_error``), and go on with the next item.  Returns how many
        items it committed once no item came within ``timeout`` seconds (``None``: only when
        the queue closes).  A ``BaseException`` (``KeyboardInterrupt``) releases the item
        uncounted and ends the loop.  ``fn`` may settle the item itself (``reject``,
        ``abort(item, delay=...)``)."""
        return txn.process(self, fn, timeout, on_error)

    async def aprocess(
        self,
        fn: Callable[[Item], Awaitable[object] | object],
        timeout: float | None = None,
        *,
        on_error: Callable[[Item, Exception], object] | None = None,
    ) -> int:
        """``await reader.aprocess(fn)``: :meth:`process` for asyncio (``fn`` may be a coroutine
        function); a cancellation releases the current item uncounted."""
        return await _aio.aprocess(self, fn, timeout, on_error)

    async def aget(self, timeout: float | None = None) -> Item:
        """``await reader.aget(timeout)``: :meth:`get` for asyncio, woken by puts (no polling);
        a cancelled ``aget`` never loses or strands an item."""
        return await _aio.aget(self.core, timeout)

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
    @property
    def waiter_count(self) -> int:
        """Consumers (threads or coroutines) currently blocked in ``get``/``aget``."""
        with self.core.lock:
            return len(self.core.waiters)

    def stats(self) -> ReaderStats:
        """A snapshot of this reader's sizes and counters (no I/O; see :class:`ReaderStats`)."""
        with self.core.lock:
            return reader_stats(self.core)

    def __len__(self) -> int:
        """Items waiting for delivery (not counting open reads)."""
        return self.stats().items_waiting

    def __repr__(self) -> str:
        return f"<Reader {self.name!r} head={self.core.head}>"
