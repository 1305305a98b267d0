"""libkestrel's single-reader views of a queue: ``q.blocking_queue(reader)`` and
``q.transactional_queue(reader)`` (libkestrel's ``JournaledBlockingQueue`` and
``TransactionalBlockingQueue``), with objects in and out through a serializer.

* :class:`BlockingQueue` is non-transactional: ``get`` commits the item before returning it, so
  an item is delivered at most once (a crash after ``get`` returns loses it).
* :class:`TransactionalQueue` hands out :class:`Transaction` objects: ``commit()`` finishes the
  read, ``rollback()`` returns the item to the head with ``error_count + 1``.

Both ``put`` return once the item is as durable as the queue's sync policy says (``"always"``:
on disk) and report a full reader (``journaled.Full``) as ``False``, like libkestrel.
A payload the serializer cannot load is aborted (``error_count + 1``, so ``max_errors`` /
``dead_letter`` can retire it) and reported as :class:`~journaled.errors.SerializationError`.
"""

from __future__ import annotations

import math
from types import TracebackType
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from journaled import aio
from journaled import serializers as ser
from journaled.errors import Empty, Full, SerializationError, UnknownRead
from journaled.item import Item
from journaled.owner.closing import reader_closed
from journaled.txn import settle

if TYPE_CHECKING:
    from journaled.queue import JournaledQueue
    from journaled.reader import Reader

T = TypeVar("T")

#: Most items one ``flush`` drops per hold of the queue lock.
FLUSH_SLICE = 4096


class _Base(Generic[T]):
    def __init__(
        self, queue: JournaledQueue, reader: Reader | str, serializer: ser.Serializer | None
    ) -> None:
        self.queue = queue
        self.reader = queue.reader(reader) if isinstance(reader, str) else reader
        self.serializer: ser.Serializer = serializer if serializer is not None else ser.BytesSerializer()

    def put(self, item: T) -> bool:
        """Serialize and append ``item``; ``True`` once durable per the sync policy, ``False`` if a
        reader is full (nothing written).  Raises ``SerializationError`` for an unserializable item."""
        payload = ser.dumps(self.serializer, item)
        try:
            self.queue.put(payload)
        except Full:
            return False
        return True

    async def aput(self, item: T) -> bool:
        """:meth:`put` without blocking the event loop."""
        payload = ser.dumps(self.serializer, item)
        try:
            await aio.aput(self.queue, payload)
        except Full:
            return False
        return True

    def _load(self, item: Item) -> Any:
        try:
            return ser.loads(self.serializer, item.data)
        except SerializationError as exc:
            exc.item = item
            try:
                self.reader.abort(item)
            except UnknownRead:
                pass
            raise

    @property
    def size(self) -> int:
        """Items waiting in the reader (not counting open reads)."""
        return len(self.reader)

    def __len__(self) -> int:
        return len(self.reader)

    @property
    def waiter_count(self) -> int:
        """Consumers (threads or coroutines) currently blocked waiting for an item."""
        return self.reader.waiter_count

    def sync(self) -> None:
        """Make everything put so far durable (any sync policy)."""
        self.queue.sync()

    def flush(self) -> int:
        """Empty the queue, as libkestrel's and kestrel's ``flush``: every item waiting in the
        reader (delayed ones included) is dropped unread, counted as ``discarded``; open reads
        are left alone.  Returns how many were dropped.  (Durability is :meth:`sync`.)"""
        core = self.reader.core
        dropped = 0
        while True:
            with core.lock:  # in slices, so puts and gets are not held up for long
                if core.closed:
                    raise reader_closed(core)
                core.release_due(math.inf)
                n = core.discard_waiting(FLUSH_SLICE)
            dropped += n
            if n < FLUSH_SLICE:
                return dropped

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.queue.path!r} reader={self.reader.name!r}>"


class BlockingQueue(_Base[T]):
    """A non-transactional queue over one reader: ``get`` commits before it returns."""

    def get(self, timeout: float | None = None) -> T:
        """The next item, committed (removed for good).  Raises ``Empty`` after ``timeout`` seconds
        (``None``: wait forever) and ``QueueClosed`` if the queue closes."""
        return self._take(self.reader.get(timeout=timeout))

    def poll(self) -> T | None:
        """The next item if one is ready now, else ``None`` (ambiguous if you put ``None``s)."""
        try:
            item = self.reader.get(block=False)
        except Empty:
            return None
        return self._take(item)

    async def aget(self, timeout: float | None = None) -> T:
        """:meth:`get` for asyncio."""
        return self._take(await self.reader.aget(timeout))

    def _take(self, item: Item) -> T:
        value: T = self._load(item)  # load first: an undecodable item is aborted, not lost
        self.reader.commit(item)
        return value


class Transaction(Generic[T]):
    """One open read of a :class:`TransactionalQueue`: ``item`` plus ``commit``/``rollback``.

    As a context manager (``with tq.get() as txn:``) it commits on normal exit and rolls back
    when an ``Exception`` escapes (a ``BaseException`` such as ``KeyboardInterrupt`` releases the
    item without counting an error).  Settling twice raises :class:`~journaled.UnknownRead`.
    """

    __slots__ = ("item", "raw", "_reader")

    def __init__(self, reader: Reader, raw: Item, item: T) -> None:
        self._reader = reader
        self.raw = raw
        self.item = item

    @property
    def id(self) -> int:
        """The item's id in the journal."""
        return self.raw.id

    @property
    def error_count(self) -> int:
        """How often this item was rolled back before."""
        return self.raw.error_count

    def commit(self) -> None:
        """Done: the item is never delivered to this reader again."""
        self._reader.commit(self.raw)

    def rollback(self) -> None:
        """Give the item back to the head of the reader, ``error_count + 1``."""
        self._reader.abort(self.raw)

    def __enter__(self) -> Transaction[T]:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        settle(self._reader, self.raw, exc, commit=True)

    def __repr__(self) -> str:
        return f"<Transaction id={self.raw.id} item={self.item!r}>"


class TransactionalQueue(_Base[T]):
    """A transactional queue over one reader: ``get`` returns a :class:`Transaction`."""

    def get(self, timeout: float | None = None) -> Transaction[T]:
        """Open a read of the next item.  Raises ``Empty`` after ``timeout`` seconds (``None``:
        wait forever) and ``QueueClosed`` if the queue closes."""
        return self._wrap(self.reader.get(timeout=timeout))

    def poll(self) -> Transaction[T] | None:
        """A transaction for the next item if one is ready now, else ``None``."""
        try:
            item = self.reader.get(block=False)
        except Empty:
            return None
        return self._wrap(item)

    async def aget(self, timeout: float | None = None) -> Transaction[T]:
        """:meth:`get` for asyncio."""
        return self._wrap(await self.reader.aget(timeout))

    def _wrap(self, item: Item) -> Transaction[T]:
        return Transaction(self.reader, item, self._load(item))


__all__ = ["BlockingQueue", "Transaction", "TransactionalQueue"]
