"""``journaled.Queue``: a durable drop-in for :class:`queue.Queue`.

Backed by a :class:`~journaled.JournaledQueue` with one reader.  ``put`` serializes and appends;
``get`` opens a read; ``task_done`` commits.  So an item that was fetched but never marked done
is delivered again after a crash or restart (at-least-once), while the stdlib contract --
FIFO order, ``maxsize`` back-pressure, ``Empty``/``Full``, timeouts, ``join`` -- is unchanged
(it passes the ``BaseQueueTestMixin`` and ``BaseSimpleQueueTest`` cases of CPython's
``Lib/test/test_queue.py``, see tests/whole/test_stdlib_conformance.py).

Which read ``task_done`` commits: the oldest read still open that was fetched by the *calling
thread*, or, if that thread has none, the oldest open read of all.  So in the usual
worker-pool shape (each thread ``get``, work, ``task_done``) a crash never loses an item another
worker was still processing, and hand-offs between threads still balance.
"""

from __future__ import annotations

import importlib
import os
import pickle
import threading
import time
import types
from collections import OrderedDict, deque
from typing import Any, Generic, TypeVar

from journaled import serializers as ser
from journaled.config import QueueConfig, ReaderConfig
from journaled.core import retry
from journaled.disk import lifecycle
from journaled.errors import Full, OwnerLost, QueueClosed, SerializationError, UnknownRead
from journaled.item import Item, not_before_ms
from journaled.owner.closing import Closing, closed_error
from journaled.queue import JournaledQueue
from journaled.reader import Reader
from journaled.serializers import BytesSerializer, JsonSerializer, PickleSerializer, Serializer

T = TypeVar("T")


class Queue(Closing, Generic[T]):
    """A FIFO queue with the API and blocking behaviour of :class:`queue.Queue`, kept on disk.

    Generic like the stdlib's (``journaled.Queue[dict[str, int]]``) for type checkers; the
    serializer decides what actually round-trips.

    Args:
        path: the queue directory (created if missing).
        maxsize: as in the stdlib: ``put`` blocks while ``qsize() >= maxsize`` (``<= 0``:
            unbounded).  Settable at any time; raising it wakes blocked ``put`` calls.
        serializer: turns items into bytes and back: anything with ``dumps``/``loads``, such
            as the :mod:`pickle` (default) or :mod:`json` modules, or :class:`BytesSerializer`.
        config: the :class:`~journaled.QueueConfig` (sync policy etc.) of the directory.
        reader: name of the reader this queue consumes through (default ``"default"``).
        reader_config: policies of that reader (:class:`~journaled.ReaderConfig`).

    ``qsize``/``empty``/``full`` count items put and not yet fetched by ``get`` (as in the
    stdlib); ``unfinished_tasks`` counts those plus the fetched ones not yet ``task_done``.
    Both start from what the directory holds when the queue is opened and then follow the
    calls made on this object: items put straight into :attr:`journal`, or dropped by reader
    policies such as ``max_age``, are delivered/skipped correctly but only show in the counts
    after a reopen.  :meth:`close` (or ``with``) flushes and releases the directory at once;
    a queue still open when the program ends is closed then (nothing put is lost), and one
    garbage-collected while open is closed with a ``ResourceWarning``.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        maxsize: int = 0,
        serializer: Serializer = pickle,
        *,
        config: QueueConfig | None = None,
        reader: str = "default",
        reader_config: ReaderConfig | None = None,
    ) -> None:
        self._maxsize = maxsize
        self.serializer = serializer
        self._args = (os.fspath(path), config, reader, reader_config)  # for __reduce__
        self.journal = JournaledQueue(path, config)
        try:
            self.reader: Reader = self.journal.reader(reader, reader_config)
        except BaseException:
            self.journal.close()
            raise
        # Same names as the stdlib's Queue; not_empty is absent: gets wait inside the reader.
        self.mutex = threading.Lock()
        self.not_full = threading.Condition(self.mutex)
        self.all_tasks_done = threading.Condition(self.mutex)
        # Items put (or reserved by a put in progress) and not yet fetched; our own count so
        # that a put is visible to qsize/full the moment it is admitted, as in the stdlib.
        self._count = len(self.reader)
        self._open: OrderedDict[int, int] = OrderedDict()  # open read id -> fetching thread
        self._by_thread: dict[int, deque[int]] = {}
        self._closed = self._forked = False
        lifecycle.track(self, None, Queue._forget_in_child)

    # ------------------------------------------------------------------ sizes
    @property
    def maxsize(self) -> int:
        """The bound ``put`` respects (``<= 0``: none); setting it wakes blocked ``put`` calls."""
        return self._maxsize

    @maxsize.setter
    def maxsize(self, value: int) -> None:
        with self.mutex:
            self._maxsize = value
            self.not_full.notify_all()

    def qsize(self) -> int:
        """Number of items put and not yet fetched by ``get``."""
        with self.mutex:
            return self._count

    def empty(self) -> bool:
        """``qsize() == 0`` (only a snapshot, as in the stdlib)."""
        with self.mutex:
            return not self._count

    def full(self) -> bool:
        """``0 < maxsize <= qsize()`` (only a snapshot, as in the stdlib)."""
        with self.mutex:
            return 0 < self._maxsize <= self._count

    @property
    def unfinished_tasks(self) -> int:
        """Items put and not yet ``task_done`` (waiting plus fetched)."""
        with self.mutex:
            return self._count + len(self._open)

    # ------------------------------------------------------------------ put
    def put(
        self, item: T, block: bool = True, timeout: float | None = None, *, delay: float | None = None
    ) -> None:
        """Put ``item`` into the queue, exactly as :meth:`queue.Queue.put`.

        With a ``maxsize``, blocks while full (``block=False`` or a ``timeout`` raise
        :class:`~journaled.Full`, a ``queue.Full``; a negative timeout raises ``ValueError``).
        Returns once the item is as durable as the sync policy says.  An item the serializer
        rejects raises :class:`~journaled.errors.SerializationError` and is not put.

        ``delay`` (seconds, an extension): no ``get`` returns the item before then, and items
        put after it are not held back behind it; it counts in ``qsize`` from the put on (it is
        in the queue, just not due).  The delay is stored with the item, so it survives a
        restart.  Headers and keys are not offered here: ``get`` returns the object, not an
        :class:`~journaled.Item` (use :attr:`journal` for them).
        """
        payload = ser.dumps(self.serializer, item)
        if delay is not None:
            not_before_ms(None, delay, 0)  # a bad delay raises before the slot is taken
        with self.not_full:
            self._check_open()
            if self._maxsize > 0:
                if not block:
                    if self._count >= self._maxsize:
                        raise Full
                elif timeout is None:
                    while self._count >= self._maxsize:
                        self.not_full.wait()
                        self._check_open()
                elif timeout < 0:
                    raise ValueError("'timeout' must be a non-negative number")
                else:
                    endtime = time.monotonic() + timeout
                    while self._count >= self._maxsize:
                        remaining = endtime - time.monotonic()
                        if remaining <= 0.0:
                            raise Full
                        self.not_full.wait(remaining)
                        self._check_open()
            self._count += 1  # reserve the slot before the (possibly fsyncing) append
        try:
            if delay is None:
                self.journal.put(payload)
            else:
                self.journal.put(payload, delay=delay)
        except BaseException:
            with self.not_full:
                self._count -= 1
                self.not_full.notify()
            raise

    def put_nowait(self, item: T) -> None:
        """``put(item, block=False)``."""
        self.put(item, block=False)

    # ------------------------------------------------------------------ get
    def get(self, block: bool = True, timeout: float | None = None) -> T:
        """Remove and return the next item, exactly as :meth:`queue.Queue.get`.

        Raises :class:`~journaled.Empty` (a ``queue.Empty``) when nothing arrives in time and
        ``ValueError`` for a negative timeout.  The item stays an open read until
        :meth:`task_done`; if the process dies first it is delivered again on the next open.
        A payload the serializer cannot load raises ``SerializationError`` (with ``.item``);
        it still counts as fetched, so call ``task_done()`` to drop it.
        """
        if not block:
            timeout = None
        elif timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        try:
            raw = self.reader.get(block, timeout)
        except QueueClosed:
            self._check_open()
            raise
        me = threading.get_ident()
        with self.not_full:
            if self._count > 0:  # 0: the item was put into self.journal directly, not via us
                self._count -= 1
            self._open[raw.id] = me
            self._by_thread.setdefault(me, deque()).append(raw.id)
            self.not_full.notify()
        return self._load(raw)

    def get_many(self, max_items: int, block: bool = True, timeout: float | None = None) -> list[T]:
        """Remove and return up to ``max_items`` items at once: waits like :meth:`get` for the
        first (``Empty`` if none comes), then takes what else is ready now.  Each one counts as
        fetched: call :meth:`task_done` (or :meth:`nack`) once per item.  If a payload cannot
        be loaded, ``SerializationError`` is raised (``.item`` is the first bad one) and the
        whole batch still counts as fetched."""
        if not block:
            timeout = None
        elif timeout is not None and timeout < 0:
            raise ValueError("'timeout' must be a non-negative number")
        try:
            raws = self.reader.get_many(max_items, timeout, block=block)
        except QueueClosed:
            self._check_open()
            raise
        me = threading.get_ident()
        with self.not_full:
            self._count = max(0, self._count - len(raws))
            for raw in raws:
                self._open[raw.id] = me
            self._by_thread.setdefault(me, deque()).extend(raw.id for raw in raws)
            self.not_full.notify(len(raws))
        return [self._load(raw) for raw in raws]

    def get_nowait(self) -> T:
        """``get(block=False)``."""
        return self.get(block=False)

    def _load(self, raw: Item) -> T:
        try:
            value: T = ser.loads(self.serializer, raw.data)
        except SerializationError as exc:
            exc.item = raw
            raise
        return value

    # ------------------------------------------------------------------ task_done / join
    def task_done(self) -> None:
        """Commit one fetched item: the calling thread's oldest open read, else the oldest of
        all.  Raises ``ValueError`` if no fetched item is waiting for ``task_done``."""
        me = threading.get_ident()
        with self.all_tasks_done:
            self._check_open()
            item_id = self._pick_locked(me)
            if item_id is None:
                raise ValueError("task_done() called too many times")
            try:
                self.reader.commit(item_id)
            except (UnknownRead, OwnerLost) as exc:
                # Not committed: a reader policy (open_read_timeout) took it back, or (a client)
                # its read was lost with the owner.  Either way it is delivered again: waiting,
                # not fetched, so that join() waits for it.
                del self._open[item_id]
                self._count += 1
                if isinstance(exc, OwnerLost):
                    raise
                return
            del self._open[item_id]
            if not self._count and not self._open:
                self.all_tasks_done.notify_all()

    def nack(self, delay: float = 0) -> None:
        """Give one fetched item back instead of :meth:`task_done` (persist-queue's ``nack``):
        the calling thread's oldest open read (else the oldest of all) is delivered again,
        ``error_count + 1``, after ``delay`` seconds (meanwhile later items are delivered).
        With ``max_errors`` in ``reader_config`` it goes to ``dead_letter`` once that many
        tries failed.  Raises ``ValueError`` if no fetched item is waiting."""
        wait = retry.check_delay(delay)
        me = threading.get_ident()
        with self.all_tasks_done:
            self._check_open()
            item_id = self._pick_locked(me)
            if item_id is None:
                raise ValueError("nack() called with no fetched item")
            del self._open[item_id]
            core = getattr(self.reader, "core", None)
            if core is None:  # a client process: the owner applies max_errors
                try:
                    self.reader.abort(item_id, wait)
                    self._count += 1
                except UnknownRead:
                    pass
                except OwnerLost:
                    self._count += 1  # lost with the owner: the next one delivers it again
                    raise
            else:
                with core.lock:
                    if core.closed:
                        raise closed_error(self.journal.path, self._forked)
                    if core.open.get(item_id) is not None:
                        core.abort(item_id, wait)
                        if item_id in core.errors and item_id not in core.disposing:
                            self._count += 1  # waiting again (not retired by max_errors)
            if not self._count and not self._open:
                self.all_tasks_done.notify_all()

    def _pick_locked(self, me: int) -> int | None:
        mine = self._by_thread.get(me)
        while mine:
            item_id = mine.popleft()
            if item_id in self._open:
                if not mine:
                    del self._by_thread[me]
                return item_id
        self._by_thread.pop(me, None)
        for item_id, owner in self._open.items():
            owners = self._by_thread.get(owner)
            if owners is not None:
                try:
                    owners.remove(item_id)
                except ValueError:
                    pass
                if not owners:
                    del self._by_thread[owner]
            return item_id
        return None

    def join(self) -> None:
        """Block until every item put has been fetched and marked ``task_done``."""
        with self.all_tasks_done:
            while self._count or self._open:
                self._check_open()
                self.all_tasks_done.wait()

    # ------------------------------------------------------------------ lifetime
    def _check_open(self) -> None:
        if self._closed:
            raise closed_error(self.journal.path, self._forked)

    def _forget_in_child(self) -> None:
        # fork hook: a thread of the parent may have held the mutex; every call now raises
        self._closed = self._forked = True
        self.mutex = threading.Lock()
        self.not_full = threading.Condition(self.mutex)
        self.all_tasks_done = threading.Condition(self.mutex)

    def close(self) -> None:
        """Flush, checkpoint and release the directory.  Items fetched and not ``task_done``
        are delivered again on the next open.  Blocked calls get :class:`QueueClosed`."""
        with self.mutex:
            self._closed = True
            self.not_full.notify_all()
            self.all_tasks_done.notify_all()
        self.journal.close()

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called, or the queue was closed at the program's end."""
        return self._closed or self.journal.closed

    def __reduce__(self) -> tuple[Any, ...]:
        """Sent to another process (a ``multiprocessing`` child started by spawn or forkserver,
        or through a ``multiprocessing.Queue``), the queue is opened there by path and works
        through this directory's owner; a serializer that is a module (``pickle``, ``json``)
        travels by name."""
        path, config, reader, reader_config = self._args
        serializer: Any = self.serializer
        if isinstance(serializer, types.ModuleType):
            serializer = ModuleRef(serializer.__name__)
        return reopen_queue, (path, self._maxsize, serializer, config, reader, reader_config)

    def __repr__(self) -> str:
        return f"<journaled.Queue {self.journal.path!r} maxsize={self._maxsize}>"


class ModuleRef(str):
    """A serializer module named in a pickle (modules themselves do not pickle)."""


def reopen_queue(
    path: str,
    maxsize: int,
    serializer: Any,
    config: QueueConfig | None,
    reader: str,
    reader_config: ReaderConfig | None,
) -> Queue[Any]:
    """Unpickle a :class:`Queue`: open it in this process (a client of the owner, or the owner)."""
    if isinstance(serializer, ModuleRef):
        serializer = importlib.import_module(serializer)
    return Queue(path, maxsize, serializer, config=config, reader=reader, reader_config=reader_config)


__all__ = ["BytesSerializer", "JsonSerializer", "PickleSerializer", "Queue", "Serializer"]
