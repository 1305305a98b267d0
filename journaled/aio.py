"""asyncio support: awaitable gets, async transactions and loops, and non-blocking puts.

A waiting ``aget`` joins the reader's FIFO line of waiters exactly like a blocked thread, so
threads and coroutines are served in arrival order and a put hands its item straight to the
first of them.  The hand-off happens under the queue lock on the putting thread; the waiter's
``wake`` only schedules its future with ``loop.call_soon_threadsafe`` -- nothing polls.

Cancellation never loses or strands an item: a cancelled (or timed-out) ``aget`` leaves the
line under the lock, and if an item had already been handed to it, that item goes back to the
head of the reader *without* an ``error_count`` increment (the item did nothing wrong).

The commit rules of :mod:`journaled.txn` apply unchanged to :class:`AsyncTransactionContext`
and :class:`AsyncItemIterator`; a cancellation counts as a ``BaseException`` (release, no error).
So does what :mod:`journaled.txn` says of a lost owner: in a client of another process's queue a
commit lost with its owner is reported and the loop goes on with the next owner.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, TypeVar, cast

from journaled.errors import Empty, OwnerLost, QueueClosed, UnknownRead
from journaled.item import Item
from journaled.owner import closing
from journaled.txn import Consumer, ItemLoop, check_timeout, failed, finish, lost_commit, settle

T = TypeVar("T")

if TYPE_CHECKING:
    import datetime as _dt

    from journaled.core.readercore import ReaderCore
    from journaled.queue import JournaledQueue


async def off_loop(reader: Consumer, call: Callable[[], T]) -> T:
    """Carry out ``call``, a settling of ``reader``'s reads: inline for a reader of this process
    (it only takes the queue lock), in the loop's default executor for a reader another process
    serves (``settles_remotely``): a round trip to the owner, which may wait out a change of
    owner, must not stop the event loop."""
    if not getattr(reader, "settles_remotely", False):
        return call()
    return await asyncio.get_running_loop().run_in_executor(None, call)


class AsyncConsumer(Consumer, Protocol):
    """What async scoped reads and loops need of a reader: :class:`Consumer` plus ``aget``."""

    async def aget(self, timeout: float | None = None) -> Item: ...


class AsyncWaiter:
    """A coroutine in a reader's line of waiters (a :class:`~journaled.core.waiters.Waiter`)."""

    __slots__ = ("item", "_core", "_loop", "future")

    def __init__(self, core: ReaderCore, loop: asyncio.AbstractEventLoop) -> None:
        self.item: Item | None = None
        self._core = core
        self._loop = loop
        self.future: asyncio.Future[None] = loop.create_future()

    def deliver(self, item: Item) -> None:
        """``item`` is this coroutine's open read (under the queue lock, from any thread)."""
        self.item = item
        self.wake()

    def wake(self) -> None:
        # Called under the queue lock, from any thread.
        try:
            self._loop.call_soon_threadsafe(self.resolve)
        except RuntimeError:
            # The waiter's loop is closed: nobody will ever take this item, so put it back.
            item, self.item = self.item, None
            if item is not None:
                self._core.release(item)

    def resolve(self) -> None:
        """Wake the awaiting coroutine (from its own loop's thread)."""
        if not self.future.done():
            self.future.set_result(None)


async def aget(core: ReaderCore, timeout: float | None = None) -> Item:
    """``await reader.aget(timeout)``: open a read without blocking the event loop.

    Raises :class:`~journaled.Empty` after ``timeout`` seconds (``0``: only what is ready now),
    :class:`~journaled.QueueClosed` when the queue closes, ``ValueError`` for a negative timeout.
    """
    if timeout is not None:
        if not timeout >= 0:  # also refuses NaN
            raise ValueError("'timeout' must be a non-negative number")
        if timeout == math.inf:
            timeout = None
    loop = asyncio.get_running_loop()
    lock = core.lock
    with lock:
        if core.closed:
            raise closing.reader_closed(core)
        item = core.take_if_first()
        if item is not None:
            return item
        if timeout == 0:
            raise Empty
        waiter = AsyncWaiter(core, loop)
        core.join(waiter)
    timer = None if timeout is None else loop.call_later(timeout, waiter.resolve)
    try:
        await waiter.future
    except BaseException:
        # Cancelled: leave the line; an item handed to us meanwhile goes back, uncounted.
        with lock:
            item, waiter.item = waiter.item, None
            if item is not None:
                core.release(item)
            else:
                core.leave(waiter)
        raise
    finally:
        if timer is not None:
            timer.cancel()
    with lock:
        if waiter.item is not None:
            return waiter.item  # also when the timer fired just after the hand-off
        core.leave(waiter)
        if core.closed:
            raise closing.reader_closed(core)
    raise Empty


class AsyncTransactionContext:
    """``async with reader.atransaction(timeout) as item:`` -- commit on normal exit, abort on an
    ``Exception``, release (no error counted) on cancellation or another ``BaseException``.  A
    commit lost with the queue's owner is logged and kept in :attr:`lost`, not raised (as for
    :class:`~journaled.txn.TransactionContext`)."""

    __slots__ = ("_reader", "_timeout", "item", "lost")

    def __init__(self, reader: AsyncConsumer, timeout: float | None = None) -> None:
        check_timeout(timeout)
        self._reader = reader
        self._timeout = timeout
        self.item: Item | None = None
        #: the error that kept the block's commit from landing (its owner was gone), else None
        self.lost: OwnerLost | None = None

    async def __aenter__(self) -> Item:
        if self.item is not None:
            raise RuntimeError("a transaction context can be entered only once")
        self.item = await self._reader.aget(self._timeout)
        return self.item

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.item is not None:
            reader, item = self._reader, self.item
            if exc is None:  # the commit: off the loop for a client's reader
                self.lost = await off_loop(reader, lambda: finish(reader, item, None))
            else:  # a give-back, possibly while being cancelled: at once
                self.lost = finish(reader, item, exc)


class AsyncItemIterator(ItemLoop):
    """``async for item in reader.aiter(timeout)`` (or ``async for item in reader``).

    Item *n* is committed when the loop asks for item *n + 1* or the loop ends for lack of items
    (no item within ``timeout``; ``None`` waits forever) or because the queue closed.  A body
    that raises, ``break``s or is cancelled gives item *n* back: at once under
    ``async with reader.aiter(...) as items``, else when :meth:`aclose` runs or the iterator is
    collected.
    """

    def __aiter__(self) -> AsyncItemIterator:
        return self

    async def __anext__(self) -> Item:
        if not await off_loop(self._reader, self._advance):
            raise StopAsyncIteration
        try:
            self._current = await cast(AsyncConsumer, self._reader).aget(self._timeout)
        except (Empty, QueueClosed):
            self._finished = True
            raise StopAsyncIteration from None
        return self._current

    async def aclose(self, exc: BaseException | None = None) -> None:
        """Stop; the current item goes back to the head (aborted if ``exc`` is an
        ``Exception``, released otherwise).  Idempotent."""
        self._stop(exc)

    async def __aenter__(self) -> AsyncItemIterator:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose(exc)


async def aprocess(
    reader: AsyncConsumer,
    fn: Callable[[Item], Awaitable[object] | object],
    timeout: float | None = None,
    on_error: Callable[[Item, Exception], object] | None = None,
) -> int:
    """``await reader.aprocess(fn, timeout)``: see :meth:`journaled.Reader.aprocess`; a commit
    lost with the queue's owner is reported and the loop goes on, as in :func:`journaled.txn.process`."""
    check_timeout(timeout)
    done = 0
    while True:
        try:
            item = await reader.aget(timeout)
        except (Empty, QueueClosed):
            return done
        try:
            result = fn(item)
            if inspect.isawaitable(result):
                await result
        except Exception as exc:
            failed(reader, item, exc, on_error)
            continue
        except BaseException as exc:  # a cancellation says nothing about the item
            settle(reader, item, exc, commit=False)
            raise
        try:
            await off_loop(reader, functools.partial(reader.commit, item))
            done += 1
        except UnknownRead:
            pass  # fn settled it itself
        except QueueClosed:
            return done
        except OwnerLost as exc:
            lost_commit(reader, item, exc, on_error)


async def aput(
    queue: JournaledQueue,
    data: bytes | bytearray | memoryview,
    *,
    expire_at: float | _dt.datetime | None = None,
    ttl: float | None = None,
    not_before: float | _dt.datetime | None = None,
    delay: float | None = None,
    headers: Mapping[str, bytes] | None = None,
    key: bytes | None = None,
    dedup: bool = True,
) -> int:
    """``await q.aput(data)``: :meth:`~journaled.JournaledQueue.put` without blocking the loop."""
    keys = None if key is None else (key,)
    many = await aput_many(
        queue,
        (data,),
        expire_at=expire_at,
        ttl=ttl,
        not_before=not_before,
        delay=delay,
        headers=headers,
        keys=keys,
        dedup=dedup,
    )
    return many[0]


async def aput_many(
    queue: JournaledQueue,
    items: Iterable[bytes | bytearray | memoryview],
    *,
    expire_at: float | _dt.datetime | None = None,
    ttl: float | None = None,
    not_before: float | _dt.datetime | None = None,
    delay: float | None = None,
    headers: Mapping[str, bytes] | None = None,
    keys: Iterable[bytes | None] | None = None,
    dedup: bool = True,
) -> list[int]:
    """``await q.aput_many(items)``: :meth:`~journaled.JournaledQueue.put_many` off the loop.

    Under ``sync="always"`` the put (which waits for an fdatasync) runs in the loop's default
    thread-pool executor.  Under the other policies a put only appends to a buffer, so it runs
    inline.  A cancelled ``aput`` whose put already started in the executor still completes it.
    """
    call = functools.partial(
        queue.put_many,
        list(items),
        expire_at=expire_at,
        ttl=ttl,
        not_before=not_before,
        delay=delay,
        headers=headers,
        keys=None if keys is None else list(keys),
    )
    if not dedup:  # only then: a client queue's put_many, which wrappers.py calls here, has no dedup
        call = functools.partial(call, dedup=False)
    if queue.config.sync != "always":
        return call()
    return await asyncio.get_running_loop().run_in_executor(None, call)


__all__ = [
    "AsyncConsumer",
    "AsyncItemIterator",
    "AsyncTransactionContext",
    "aget",
    "aprocess",
    "aput",
    "aput_many",
]
