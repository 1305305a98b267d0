"""A reader of a queue that another process owns: the :class:`~journaled.Reader` calls, each
carried out by the owner (remote/handlers.py), with the same contracts.

The :class:`Item` a ``get`` returns is this delivery's handle, as in-process.  What differs:

* a read opened under an owner that is gone is not open any more: settling it raises
  :class:`OwnerLost` (it is delivered again by the next owner), and the scoped forms
  (``transaction``, ``iter``, ``process`` and their asyncio twins) report such a lost commit
  (``on_error``, else a WARNING) and go on with the next owner (journaled/txn.py);
* a blocking ``get``/``get_many`` asks the owner for at most :data:`WAIT_SLICE` seconds of
  waiting at a time (again until its own timeout, or for ever without one), and each answer has
  that wait plus ``REPLY_MARGIN`` (remote/connections.py) to come: an owner that stops
  answering (stopped, wedged) is noticed within that, even by a ``get()`` without a timeout;
* ``aget`` waits in a thread in slices of :data:`ASYNC_SLICE` seconds (there is no put on this
  process to wake it), so a cancelled ``aget`` ends within one slice and never strands an item;
  the commits of ``aprocess``, ``atransaction`` and ``async for`` run in the loop's executor
  (``settles_remotely``), so an owner's takeover never stops the event loop;
* ``config``, ``head``, ``done`` and reader sinks exist at the owner only (``stats()`` shows
  ``head`` and the sizes).

Every call is one request through :meth:`Served.call`, which carries it out at the owner, or
here if this process took the queue over: the same request and reply either way.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import logging
import math
import threading
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from types import MappingProxyType
from typing import Any, Protocol

from journaled import txn
from journaled.aio import AsyncItemIterator, AsyncTransactionContext, aprocess
from journaled.config import Start
from journaled.core.retry import check_delay
from journaled.errors import Empty, OwnerLost, UnknownRead
from journaled.format.metadata import NO_HEADERS, Meta
from journaled.item import Item, epoch_ms, new_item, read_id, with_meta
from journaled.remote import protocol as proto
from journaled.stats import ReaderStats
from journaled.txn import ItemIterator, TransactionContext

log = logging.getLogger(__name__)

#: seconds one slice of an ``aget``'s wait lasts (its thread notices a cancellation in between)
ASYNC_SLICE = 0.25
#: seconds of waiting a blocking get asks the owner for in one request (module docstring)
WAIT_SLICE = 10.0


class Served(Protocol):
    """What a remote reader needs of its queue (``remote.RemoteQueue``)."""

    @property
    def generation(self) -> int:
        """How many times the queue changed owner: a read opened under another is gone."""
        ...

    def call(
        self,
        header: dict[str, Any],
        payload: bytes = b"",
        *,
        is_put: bool = False,
        wait: float = 0.0,
        opened: int | None = None,
    ) -> tuple[dict[str, Any], bytes, int]:
        """One request, carried out by whoever owns the queue now: its reply, its payload and
        the generation it was carried out under.  ``wait``: how long the owner may take on
        purpose; ``opened``: the generation the reads a request settles were opened under."""
        ...

    def reader_stats(self, name: str) -> ReaderStats:
        """The owner's snapshot of reader ``name``."""
        ...


def _item(meta: dict[str, Any], data: bytes) -> Item:
    item = new_item(
        int(meta["id"]), data, float(meta["add_time"]), meta["expire_at"], int(meta["error_count"])
    )
    if len(meta) > 4 and ("headers" in meta or "key" in meta or "not_before" in meta):
        return with_meta(item, _stored(meta))
    return item


def _stored(meta: dict[str, Any]) -> Meta:
    """The headers, key and not-before a reply says an item carries (remote/handlers.item_meta)."""
    headers = MappingProxyType(proto.headers_raw(meta["headers"])) if "headers" in meta else NO_HEADERS
    key = proto.raw(meta["key"], "a key") if "key" in meta else None
    not_before = proto.field(meta, "not_before", int, 0)
    return Meta(not_before, 0, 0, key, headers)


class RemoteReader:
    """A reader of a queue owned by another process (module docstring).  Obtain one with
    ``queue.reader(name)`` on a client ``JournaledQueue``."""

    #: settling a read is a round trip to the owner: the asyncio forms do it off the event loop
    settles_remotely = True

    def __init__(self, queue: Served, name: str) -> None:
        self.queue = queue
        self.name = name
        self._lock = threading.Lock()  # a leaf: guards _open only
        self._open: dict[int, tuple[int, Item]] = {}  # id -> (generation, handle)
        # Reads a finalizer gave back (a ``break`` out of ``iter``), not yet sent to the owner.
        # A finalizer only appends here (deque.append takes no lock, so it cannot deadlock in
        # whatever this thread was doing); _send_give_backs sends them holding _giving_lock,
        # and a get waits for that first: at every moment the deque is not empty or the lock
        # is held until the last one has landed.
        self._giving_back: deque[Item] = deque()
        self._giving_lock = threading.Lock()  # held while give-backs are sent; a get waits

    # ------------------------------------------------------------------ opening reads
    def get(self, block: bool = True, timeout: float | None = None) -> Item:
        """Open a read of the next item (blocks as :meth:`journaled.Reader.get` does)."""
        return self._take("get", block, timeout, 1)[0]

    def get_many(self, max_items: int, timeout: float | None = None, *, block: bool = True) -> list[Item]:
        """Open up to ``max_items`` reads with one request, as :meth:`journaled.Reader.get_many`:
        waits for the first (``Empty`` if none comes), then takes what else is ready now."""
        if isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 1:
            raise ValueError(f"max_items must be a positive int, got {max_items!r}")
        return self._take("get_many", block, timeout, max_items)

    def _take(self, op: str, block: bool, timeout: float | None, most: int) -> list[Item]:
        if timeout is not None and not timeout >= 0:
            raise ValueError("'timeout' must be a non-negative number")
        header: dict[str, Any] = {"op": op, "reader": self.name, "block": bool(block)}
        if op == "get_many":
            header["max_items"] = most
        if self._giving_back or self._giving_lock.locked():
            self._send_give_backs()  # so an item given back by a finalizer comes first
        deadline = None if timeout is None or timeout == float("inf") else time.monotonic() + timeout
        while True:
            left = WAIT_SLICE if deadline is None else min(WAIT_SLICE, max(deadline - time.monotonic(), 0.0))
            header["timeout"] = left if block else 0.0
            try:
                reply, data, generation = self.queue.call(header, wait=left if block else 0.0)
                break
            except Empty:
                if not block or (deadline is not None and time.monotonic() >= deadline):
                    raise
        if op == "get":
            items = [_item(reply, data)]
        else:
            pieces = proto.split(data, reply.get("lens"))
            items = [_item(meta, piece) for meta, piece in zip(reply["items"], pieces)]
        with self._lock:
            for item in items:
                self._open[item.id] = (generation, item)
        return items

    # ------------------------------------------------------------------ settling reads
    def _settle(self, op: str, item: Item | int, **kwargs: Any) -> None:
        key = item.id if isinstance(item, Item) else read_id(item)
        with self._lock:
            entry = self._open.get(key)
            if entry is None or (isinstance(item, Item) and entry[1] is not item):
                raise UnknownRead(f"no open read of {key} on reader {self.name!r} in this process")
            del self._open[key]
        if entry[0] != self.queue.generation:
            raise OwnerLost(f"read {key} was opened under an owner that is gone; it is delivered again")
        self.queue.call(dict({"op": op, "reader": self.name, "id": key}, **kwargs), opened=entry[0])

    def commit(self, item: Item | int) -> None:
        """Finish an open read: the item is never delivered to this reader again."""
        self._settle("commit", item)

    def commit_many(self, items: Iterable[Item | int]) -> None:
        """:meth:`journaled.Reader.commit_many` with one request: every item that is an open
        read of this process is committed; the others raise one :class:`UnknownRead` at the end
        (:class:`OwnerLost` if they were opened under an owner that is gone)."""
        batch = list(items)
        keys = [item.id if isinstance(item, Item) else read_id(item) for item in batch]
        mine: list[int] = []
        unknown: list[int] = []
        stale = False
        generation = self.queue.generation
        with self._lock:
            for item, key in zip(batch, keys):
                entry = self._open.get(key)
                if entry is None or (isinstance(item, Item) and entry[1] is not item):
                    unknown.append(key)
                    continue
                del self._open[key]
                if entry[0] != generation:
                    stale = True
                    continue
                mine.append(key)
        if mine:
            self.queue.call({"op": "commit_many", "reader": self.name, "ids": mine}, opened=generation)
        if stale:
            raise OwnerLost("some reads were opened under an owner that is gone; they are delivered again")
        if unknown:
            raise UnknownRead(f"no open reads of {unknown} on reader {self.name!r} in this process")

    def abort(self, item: Item | int, delay: float | None = None) -> None:
        """Give an open read back (its error count goes up); ``delay`` as for
        :meth:`journaled.Reader.abort` (the owner's ``retry_delay`` backoff when ``None``)."""
        check_delay(delay)
        self._settle("abort", item, **({} if delay is None else {"delay": delay}))

    def reject(self, item: Item | int, reason: str = "") -> None:
        """Give up on an open read for good, as :meth:`journaled.Reader.reject` (to the owner's
        ``dead_letter`` if it has one)."""
        if not isinstance(reason, str):
            raise TypeError(f"reason must be a str, got {type(reason).__name__}")
        self._settle("reject", item, reason=reason)

    def release(self, item: Item | int) -> None:
        """Give an open read back without counting an error."""
        self._settle("release", item)

    def release_later(self, item: Item) -> None:
        """Give ``item`` back from a finalizer (txn.release_later): never blocks; a thread
        sends it now, and this process's next get waits until it has landed."""
        self._giving_back.append(item)
        helper = threading.Thread(target=self._send_give_backs, name=f"journaled-giveback-{self.name}")
        helper.daemon = True
        helper.start()

    def _send_give_backs(self) -> None:
        with self._giving_lock:
            while self._giving_back:
                try:
                    item = self._giving_back.popleft()
                except IndexError:
                    return
                try:
                    txn.settle(self, item, None, commit=False)
                except Exception:  # the owner takes it back when this connection ends
                    log.warning("reader %s: giving back item %d failed", self.name, item.id, exc_info=True)

    def seek(self, position: Start) -> int:
        """Move this reader, as :meth:`journaled.Reader.seek` (every open read of it, in every
        process, is taken back first); returns the new head."""
        where: Any = position
        if isinstance(position, _dt.datetime):
            where = epoch_ms(position) / 1000.0
        elif isinstance(position, float) and not math.isfinite(position):
            raise ValueError(f"start: time must be finite, got {position!r}")  # as in-process
        elif isinstance(position, bool) or not isinstance(position, (str, int, float)):
            raise TypeError(
                f"position must be 'earliest', 'latest', an id, epoch seconds or a datetime, "
                f"not {type(position).__name__}"
            )
        head = int(self.queue.call({"op": "seek", "reader": self.name, "position": where})[0]["head"])
        with self._lock:
            self._open.clear()
        return head

    # ------------------------------------------------------------------ scoped reads and loops
    def transaction(self, timeout: float | None = None, *, block: bool = True) -> TransactionContext:
        """``with reader.transaction(timeout) as item:`` as for :meth:`journaled.Reader.transaction`."""
        return TransactionContext(self, timeout, block=block)

    def iter(self, timeout: float | None = None) -> ItemIterator:
        """``for item in reader.iter(timeout)`` as for :meth:`journaled.Reader.iter`."""
        return ItemIterator(self, timeout)

    def process(
        self,
        fn: Callable[[Item], object],
        timeout: float | None = None,
        *,
        on_error: Callable[[Item, Exception], object] | None = None,
    ) -> int:
        """The worker loop of :meth:`journaled.Reader.process`; it goes on through a change of
        owner: a commit lost with the owner is passed to ``on_error`` (else logged), the item
        is delivered again (``fn`` runs for it at least once more, maybe in another process)."""
        return txn.process(self, fn, timeout, on_error)

    async def aget(self, timeout: float | None = None) -> Item:
        """``await reader.aget(timeout)``: :meth:`get` without blocking the event loop.  A
        cancelled ``aget`` returns once any item it got meanwhile is back at the head,
        uncounted (within one :data:`ASYNC_SLICE`), so the order of the items is kept."""
        txn.check_timeout(timeout)
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Item] = loop.create_future()
        deadline = None if timeout is None else time.monotonic() + timeout
        stop = threading.Event()

        def give_back(item: Item) -> None:
            txn.settle(self, item, None, commit=False)

        def post(item: Item | None, exc: BaseException | None) -> None:
            if future.cancelled():
                if item is not None:
                    give_back(item)  # on the loop: done before the cancelled aget returns
            elif exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(item)  # type: ignore[arg-type]

        def wait() -> None:
            while not stop.is_set():
                left = ASYNC_SLICE if deadline is None else min(ASYNC_SLICE, deadline - time.monotonic())
                try:
                    item: Item | None = self.get(True, max(left, 0.0))
                    exc: BaseException | None = None
                except Empty as empty:
                    if deadline is None or time.monotonic() < deadline:
                        continue
                    item, exc = None, empty
                except BaseException as failure:
                    item, exc = None, failure
                if stop.is_set():
                    if item is not None:
                        give_back(item)
                    return
                try:
                    loop.call_soon_threadsafe(post, item, exc)
                except RuntimeError:  # the loop is closed: nobody will take it
                    if item is not None:
                        give_back(item)
                return

        thread = threading.Thread(target=wait, name=f"journaled-aget-{self.name}", daemon=True)
        thread.start()
        try:
            return await future
        except asyncio.CancelledError:
            stop.set()
            try:
                # its last post (if any) was queued before it ended, so it runs before we go on
                await asyncio.shield(loop.run_in_executor(None, thread.join))
            finally:
                # the item came just before the cancel: the post gave it to the future, which
                # nobody will read now
                if future.done() and not future.cancelled() and future.exception() is None:
                    give_back(future.result())
            raise

    def atransaction(self, timeout: float | None = None) -> AsyncTransactionContext:
        """``async with reader.atransaction(timeout) as item:`` as in-process."""
        return AsyncTransactionContext(self, timeout)

    def aiter(self, timeout: float | None = None) -> AsyncItemIterator:
        """``async for item in reader.aiter(timeout)`` as in-process."""
        return AsyncItemIterator(self, timeout)

    def __aiter__(self) -> AsyncItemIterator:
        """``async for item in reader``: :meth:`aiter` without a timeout."""
        return AsyncItemIterator(self)

    async def aprocess(
        self,
        fn: Callable[[Item], Awaitable[object] | object],
        timeout: float | None = None,
        *,
        on_error: Callable[[Item, Exception], object] | None = None,
    ) -> int:
        """``await reader.aprocess(fn)``: :meth:`process` for asyncio."""
        return await aprocess(self, fn, timeout, on_error)

    # ------------------------------------------------------------------ state
    def stats(self) -> ReaderStats:
        """This reader's snapshot, from the owner."""
        return self.queue.reader_stats(self.name)

    def __len__(self) -> int:
        """Items waiting for delivery (not counting open reads), at the owner."""
        return self.stats().items_waiting

    def __repr__(self) -> str:
        return f"<RemoteReader {self.name!r}>"


__all__ = ["ASYNC_SLICE", "RemoteReader", "Served"]
