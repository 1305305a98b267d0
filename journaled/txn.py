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

**A lost owner.**  In a process that is a client of another process's queue, the owner may close
or die while an item is being worked on: its read is gone with that owner, and its commit cannot
land (:class:`~journaled.OwnerLost`).  None of the three shapes ends for that: the lost commit is
reported (to ``on_error`` in :func:`process`, else a WARNING on the ``journaled`` logger), the
item is delivered again by the next owner (at least once: the consumer's code may run for it
again, possibly in another process), and the next ``get`` goes to the next owner.  An abort or
release that cannot land is skipped: the item comes back anyway, without that error counted.
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
        # owner).  A failed commit is raised, for the caller to report; a failed give-back is
        # not (it would mask the exception in flight).
        if exc is None and commit:
            raise


def report(
    reader: Consumer,
    item: Item,
    exc: Exception,
    on_error: Callable[[Item, Exception], object] | None,
    message: str,
) -> None:
    """Tell ``on_error(item, exc)``, or log ``message`` and ``exc``'s traceback as an ERROR when
    there is no ``on_error``; an exception of ``on_error`` itself is logged, never raised."""
    if on_error is None:
        log.error("reader %s: " + message, reader.name, item.id, exc_info=exc)
        return
    try:
        on_error(item, exc)
    except Exception:
        log.exception("reader %s: on_error failed for item %d", reader.name, item.id)


def lost_commit(
    reader: Consumer, item: Item, exc: OwnerLost, on_error: Callable[[Item, Exception], object] | None = None
) -> None:
    """The body for ``item`` finished, but its commit raised ``exc``: the read was opened under
    an owner that closed or died.  Passed to ``on_error``, else logged as one WARNING line (no
    traceback: nothing failed in the consumer's code); the loop goes on."""
    if on_error is not None:
        report(reader, item, exc, on_error, "")
        return
    log.warning(
        "reader %s: item %d was processed, but its read was lost with the queue's owner (%s); "
        "it is delivered again",
        reader.name,
        item.id,
        exc,
    )


def release_later(reader: Consumer, item: Item) -> None:
    """Release ``item`` from a finalizer, which may run while this very thread holds the
    queue lock (it is not reentrant): never block on that lock here.  A reader that settles
    remotely queues it with its own ``release_later``, which sends it before its next get, so
    the item is back at the head before this thread asks for another (``break`` keeps order)."""
    own = getattr(reader, "release_later", None)
    if own is not None:
        own(item)
        return
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
    """Reject a negative ``timeout``, and NaN, which no wait could ever reach (``None`` waits
    forever), as :meth:`journaled.Reader.get` does."""
    if timeout is not None and not timeout >= 0:
        raise ValueError("'timeout' must be a non-negative number")


class TransactionContext:
    """``with reader.transaction(timeout) as item:`` -- one read scoped to a block.

    ``__enter__`` opens the read (raising :class:`~journaled.Empty` on timeout or
    :class:`~journaled.QueueClosed`); ``__exit__`` commits it, aborts it (an ``Exception``
    escaped) or releases it (a ``BaseException`` such as a cancellation escaped).

    A commit that cannot land because the read was opened under an owner that is gone (a client
    of another process's queue) does not raise: it is logged as a WARNING and kept in
    :attr:`lost` (the :class:`~journaled.OwnerLost`); the item is delivered again.
    """

    __slots__ = ("_reader", "_block", "_timeout", "item", "lost")

    def __init__(self, reader: Consumer, timeout: float | None = None, *, block: bool = True) -> None:
        check_timeout(timeout)
        self._reader = reader
        self._block = block
        self._timeout = timeout
        self.item: Item | None = None
        #: the error that kept the block's commit from landing (its owner was gone), else None
        self.lost: OwnerLost | None = None

    def __enter__(self) -> Item:
        if self.item is not None:
            raise RuntimeError("a transaction context can be entered only once")
        self.item = self._reader.get(self._block, self._timeout)
        return self.item

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.item is not None:
            self.lost = finish(self._reader, self.item, exc)


def finish(reader: Consumer, item: Item, exc: BaseException | None) -> OwnerLost | None:
    """A transaction's block ended (``exc`` escaped it, or None): settle ``item``; a commit lost
    with its owner is logged and returned instead of raised."""
    try:
        settle(reader, item, exc, commit=True)
    except OwnerLost as lost:
        lost_commit(reader, item, lost)
        return lost
    return None


class ItemLoop:
    """What :class:`ItemIterator` and :class:`journaled.aio.AsyncItemIterator` share: the item
    handed out last, its commit when the next one is asked for, and its give-back on a stop."""

    def __init__(self, reader: Consumer, timeout: float | None = None) -> None:
        check_timeout(timeout)
        self._reader = reader
        self._timeout = timeout
        self._current: Item | None = None
        self._finished = False
        #: items whose commit could not land because their owner was gone (delivered again)
        self.lost = 0

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
            except OwnerLost as exc:
                self.lost += 1  # not committed: the next owner delivers it again; go on
                lost_commit(self._reader, current, exc)
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
    """A worker loop's body raised ``exc`` for ``item``: abort it and report it (once, with
    ``exc``, also when the abort could not land because the item's owner was gone)."""
    settle(reader, item, exc, commit=False)
    report(reader, item, exc, on_error, "processing item %d failed; aborted")


def process(
    reader: Consumer,
    fn: Callable[[Item], object],
    timeout: float | None = None,
    on_error: Callable[[Item, Exception], object] | None = None,
) -> int:
    """``reader.process(fn, timeout)``: see :meth:`journaled.Reader.process`.

    A client of another process's queue goes on through a change of owner: a commit that
    cannot land because the item's read was lost with its owner (:class:`~journaled.OwnerLost`)
    is passed to ``on_error`` (else logged as a WARNING), is not counted in the result, and the
    item is delivered again, so ``fn`` runs for it at least once more (maybe in another
    process).  The loop raises ``OwnerLost`` only when no owner can be reached or become."""
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
        except OwnerLost as exc:
            lost_commit(reader, item, exc, on_error)


__all__ = ["Consumer", "ItemIterator", "TransactionContext", "process", "settle"]
