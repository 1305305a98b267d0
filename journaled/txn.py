"""Reads as scoped transactions and as loops, on top of ``Reader.get/commit/abort``.

Two shapes, one rule: *an item is committed only after the consumer's code for it has
finished normally*; anything else gives it back to the head of the reader.

* :class:`TransactionContext` (``with reader.transaction(timeout) as item:``): commit when the
  block exits normally, abort (``error_count + 1``) when it raises an :class:`Exception`,
  release (no error counted) on a ``BaseException`` such as ``KeyboardInterrupt`` or a
  cancellation, which say nothing about the item.
* :class:`ItemIterator` (``for item in reader.iter(timeout)``): item *n* is committed when the
  loop asks for item *n + 1* -- i.e. after the loop body for *n* ran to its end -- or when the
  loop ends because nothing arrived within ``timeout``.  If the body raises, ``break``s or
  ``return``s, item *n* goes back to the head: at once when the iterator is used as a context
  manager (``with reader.iter(...) as items``), else when the iterator is closed or collected,
  and in any case after a restart.

A third shape keeps going: :func:`process` (``reader.process(fn)``) calls ``fn(item)`` for
each item; an :class:`Exception` aborts that item (logged) and the loop goes on with the next.

If the body already committed or aborted the item itself, nothing more is done with it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Protocol

from journaled.errors import Empty, OwnerLost, QueueClosed, UnknownRead
from journaled.item import Item

log = logging.getLogger("journaled")


class Consumer(Protocol):
    """What scoped reads and loops need of a reader: a :class:`~journaled.Reader`, or a
    reader of a queue owned by another process (remote/clientreader.py)."""

    name: str

    def get(self, block: bool = True, timeout: float | None = None) -> Item: ...
    def commit(self, item: Item | int) -> None: ...
    def abort(self, item: Item | int, delay: float | None = None) -> None: ...
    def release(self, item: Item | int) -> None: ...


def settle(reader: Consumer, item: Item, exc: BaseException | None, *, commit: bool) -> None:
    """Finish ``item`` if it is still an open read: commit it (``commit=True`` and no ``exc``),
    abort it (``exc`` is an :class:`Exception`) or release it (anything else)."""
    try:
        if exc is None and commit:
            reader.commit(item)
        elif isinstance(exc, Exception):
            reader.abort(item)
        else:
            reader.release(item)
    except UnknownRead:
        pass  # the consumer settled it already
    except (QueueClosed, OwnerLost):
        # The item stays uncommitted and is delivered again on the next open (or by the next
        # owner).  A failed commit is reported; a failed give-back is not (it would mask the
        # exception in flight).
        if exc is None and commit:
            raise


def release_later(reader: Consumer, item: Item) -> None:
    """Release ``item`` from a finalizer, which may run while this very thread holds the
    queue lock (it is not reentrant): never block on that lock here."""
    core = getattr(reader, "core", None)
    if core is not None and core.lock.acquire(blocking=False):
        try:
            if core.open.get(item.id) is item:
                core.release(item)
        finally:
            core.lock.release()
    else:
        helper = threading.Thread(target=settle, args=(reader, item, None), kwargs={"commit": False})
        helper.daemon = True
        helper.start()


def check_timeout(timeout: float | None) -> None:
    """Reject a negative ``timeout`` (``None`` waits forever)."""
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


class TransactionContext:
    """``with reader.transaction(timeout) as item:`` -- one read scoped to a block.

    ``__enter__`` opens the read (raising :class:`~journaled.Empty` on timeout or
    :class:`~journaled.QueueClosed`); ``__exit__`` commits it, aborts it (an ``Exception``
    escaped) or releases it (a ``BaseException`` such as a cancellation escaped).
    """

    __slots__ = ("_reader", "_block", "_timeout", "item")

    def __init__(self, reader: Consumer, timeout: float | None = None, *, block: bool = True) -> None:
        check_timeout(timeout)
        self._reader = reader
        self._block = block
        self._timeout = timeout
        self.item: Item | None = None

    def __enter__(self) -> Item:
        if self.item is not None:
            raise RuntimeError("a transaction context can be entered only once")
        self.item = self._reader.get(self._block, self._timeout)
        return self.item

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.item is not None:
            settle(self._reader, self.item, exc, commit=True)


class ItemLoop:
    """What :class:`ItemIterator` and :class:`journaled.aio.AsyncItemIterator` share: the item
    handed out last, its commit when the next one is asked for, and its give-back on a stop."""

    def __init__(self, reader: Consumer, timeout: float | None = None) -> None:
        check_timeout(timeout)
        self._reader = reader
        self._timeout = timeout
        self._current: Item | None = None
        self._finished = False

    @property
    def current(self) -> Item | None:
        """The item handed out last and not yet committed by the iterator."""
        return self._current

    def _advance(self) -> bool:
        """Commit the item handed out last (its loop body has finished); False when the loop
        is over."""
        current, self._current = self._current, None
        if current is not None:
            try:
                settle(self._reader, current, None, commit=True)
            except QueueClosed:
                self._finished = True  # not committed: delivered again on the next open
        return not self._finished

    def _stop(self, exc: BaseException | None) -> None:
        self._finished = True
        current, self._current = self._current, None
        if current is not None:
            settle(self._reader, current, exc, commit=False)

    def __del__(self) -> None:
        current = getattr(self, "_current", None)
        if current is not None:
            self._current = None
            release_later(self._reader, current)


class ItemIterator(ItemLoop):
    """``for item in reader.iter(timeout)`` -- see the module docstring for when items commit.

    Ends (``StopIteration``) when no item arrives within ``timeout`` seconds (``None``: wait
    forever) or the queue closes.  Use one iterator from one thread at a time.
    """

    def __iter__(self) -> ItemIterator:
        return self

    def __next__(self) -> Item:
        if not self._advance():
            raise StopIteration
        try:
            self._current = self._reader.get(timeout=self._timeout)
        except (Empty, QueueClosed):
            self._finished = True
            raise StopIteration from None
        return self._current

    def close(self, exc: BaseException | None = None) -> None:
        """Stop: the current item (if any) goes back to the head -- aborted if ``exc`` is an
        ``Exception``, released otherwise.  Idempotent."""
        self._stop(exc)

    def __enter__(self) -> ItemIterator:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close(exc)


def failed(
    reader: Consumer, item: Item, exc: Exception, on_error: Callable[[Item, Exception], object] | None
) -> None:
    """A worker loop's body raised ``exc`` for ``item``: abort it and report it."""
    settle(reader, item, exc, commit=False)
    if on_error is None:
        log.error("reader %s: processing item %d failed; aborted", reader.name, item.id, exc_info=exc)
    else:
        try:
            on_error(item, exc)
        except Exception:
            log.exception("reader %s: on_error failed for item %d", reader.name, item.id)


def process(
    reader: Consumer,
    fn: Callable[[Item], object],
    timeout: float | None = None,
    on_error: Callable[[Item, Exception], object] | None = None,
) -> int:
    """``reader.process(fn, timeout)``: see :meth:`journaled.Reader.process`."""
    check_timeout(timeout)
    done = 0
    while True:
        try:
            item = reader.get(timeout=timeout)
        except (Empty, QueueClosed):
            return done
        try:
            fn(item)
        except Exception as exc:
            failed(reader, item, exc, on_error)
            continue
        except BaseException as exc:
            settle(reader, item, exc, commit=False)
            raise
        try:
            reader.commit(item)
            done += 1
        except UnknownRead:
            pass  # fn settled it itself
        except QueueClosed:
            return done  # not committed: delivered again on the next open


__all__ = ["Consumer", "ItemIterator", "TransactionContext", "process", "settle"]
