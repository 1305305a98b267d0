"""JournaledQueue: owns a queue directory, its journal and its named readers.

One lock guards the readers' in-memory state and the order of appends, so ``put`` is one short
critical section (encode, append to the journal buffer, hand the new item to every reader).
Durability waits (group commit), periodic flushing, checkpoints and archiving all happen outside
that lock: the first on the caller's thread, the others on one background thread.
"""

from __future__ import annotations

import datetime as _dt
import errno
import fcntl
import logging
import os
import threading
import time
from collections.abc import Iterable
from types import TracebackType
from typing import Any, cast

import attrs

from journaled import aio as _aio
from journaled import checkpoint as ckp
from journaled import fileio, policies
from journaled.config import QueueConfig, ReaderConfig, validate_name
from journaled.errors import (
    InvalidName,
    ItemTooLarge,
    JournaledError,
    QueueClosed,
    QueueLocked,
    UnknownReader,
)
from journaled.item import new_item, new_items
from journaled.journal import Journal, RecoveryEvent, detect_queue_name
from journaled.reader import Reader
from journaled.stats import QueueStats, queue_stats
from journaled.serializers import Serializer
from journaled.wrappers import BlockingQueue, TransactionalQueue
from journaled.bookmarks import read_bookmarks
from journaled.record import CheckpointData
from journaled.spool import Adopter, QueueHost

log = logging.getLogger("journaled")

LOCK_FILE = ".journaled.lock"


_JUST_BYTES = {bytes}


def _as_payload(data: object, limit: int) -> bytes:
    if isinstance(data, bytes):
        payload = data
    elif isinstance(data, (bytearray, memoryview)):
        payload = bytes(data)
    else:
        raise TypeError(
            f"items must be bytes, bytearray or memoryview, not {type(data).__name__}"
            " (serialize it first, or use journaled.Queue which pickles)"
        )
    if len(payload) > limit:
        raise ItemTooLarge(len(payload), limit)
    return payload


def _to_ms(when: float | _dt.datetime) -> int:
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.astimezone()
        return int(when.timestamp() * 1000)
    return int(when * 1000)


class JournaledQueue:
    """A durable, fan-out, transactional queue stored in one directory.

    ``JournaledQueue(path, config=QueueConfig(...))`` creates the directory if needed, takes an
    exclusive lock on it (a second owner gets :class:`QueueLocked`), recovers the journal and
    the readers' checkpoints, and starts one background thread for flushing, checkpoints and
    archiving.  Use it as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        config: QueueConfig | None = None,
        *,
        name: str | None = None,
    ) -> None:
        self.path = os.path.abspath(os.fspath(path))
        self.config = config if config is not None else QueueConfig()
        if not isinstance(self.config, QueueConfig):
            raise TypeError(f"config must be a QueueConfig, not {type(self.config).__name__}")
        os.makedirs(self.path, mode=0o700, exist_ok=True)
        self._lock_fd = self._take_lock()
        try:
            self.name = validate_name(name, "queue name") if name is not None else detect_queue_name(self.path)
            self._archive_dir = self._resolve_archive_dir()
            self._lock = threading.Lock()
            self._closed = False
            # reader policies (policies.py): wakes the background thread for sink hand-offs
            self._kick = threading.Event()
            self._disposal_lock = threading.Lock()
            self._put_count = self._put_bytes = 0
            states = self._read_reader_states()
            # never hand out an id a reader has already seen, even if the journal lost it
            floor = max(
                [st.head for st in states.values() if st is not None]
                + [max(st.done) + 1 for st in states.values() if st is not None and st.done]
                + [max(i for i, _ in st.errors) + 1 for st in states.values() if st is not None and st.errors]
                + [1]
            )
            self._journal = Journal(self.path, self.name, self.config, id_floor=floor)
            self._readers: dict[str, Reader] = {}
            self._reader_list: list[Reader] = []
            self._ckpt_lock = threading.Lock()  # serializes checkpoint file writes/removals
            # each reader's head as its checkpoint file last recorded it: archiving goes by these
            self._ckpt_heads: dict[str, int] = {}
            self._archive_wanted = True
            self._load_readers(states)
            self._spool = Adopter(self.path)
            self._adopt_spool()  # before anyone else appends: recovery arithmetic needs that
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._stop = threading.Event()
        self._close_done = threading.Event()
        self._bg = threading.Thread(target=self._background, name=f"journaled-{self.name}", daemon=True)
        self._bg.start()

    # ------------------------------------------------------------------ opening
    def _take_lock(self) -> int:
        lock_path = os.path.join(self.path, LOCK_FILE)
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            try:
                pid = int(os.pread(fd, 32, 0).decode().strip() or 0)
            except (ValueError, OSError):
                pid = 0
            os.close(fd)
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise QueueLocked(self.path, pid or None) from None
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return fd

    def _resolve_archive_dir(self) -> str | None:
        d = self.config.archive_dir
        if d is None:
            return None
        d = os.path.join(self.path, d)
        os.makedirs(d, mode=0o700, exist_ok=True)
        return d

    def _read_reader_states(self) -> dict[str, CheckpointData | None]:
        """Every known reader (registry and checkpoint files) with its checkpoint, or None when
        the checkpoint is missing or damaged (that reader replays from the earliest item)."""
        self._registered = ckp.read_registry(ckp.registry_path(self.path, self.name))
        names = set(ckp.list_checkpoints(self.path, self.name)) | set(self._registered or ())
        return {
            rname: ckp.read_checkpoint(ckp.checkpoint_path(self.path, self.name, rname))
            for rname in sorted(names)
        }

    def _load_readers(self, states: dict[str, CheckpointData | None]) -> None:
        registered = self._registered
        names = set(states)
        first, end = self._journal.first_id(), self._journal.next_id
        for rname, state in states.items():
            if state is None:
                state = CheckpointData(head=first)
            if state.head > end or state.head < first:
                log.warning(
                    "reader %s: checkpoint head %d lies outside the journal [%d, %d]; clamped",
                    rname, state.head, first, end,
                )
                head = min(max(state.head, first), end)
                state = CheckpointData(
                    head,
                    done=tuple(i for i in state.done if head <= i < end),
                    errors=tuple((i, c) for i, c in state.errors if head <= i < end),
                )
            elif any(i >= end for i in state.done) or any(i >= end for i, _ in state.errors):
                # the journal lost its tail: those ids will be reused by new items, which must
                # not inherit the old items' commits or error counts
                state = attrs.evolve(
                    state,
                    done=tuple(i for i in state.done if i < end),
                    errors=tuple((i, c) for i, c in state.errors if i < end),
                )
            self._add_reader(rname, ReaderConfig(), state)
        if registered is None or set(registered) != names:
            ckp.write_registry(ckp.registry_path(self.path, self.name), sorted(names), self.config.file_mode)

    def _add_reader(self, rname: str, config: ReaderConfig, state: CheckpointData) -> Reader:
        reader = Reader(self, rname, config, state)
        self._kick.set()  # the background thread re-checks which policies need its tick
        self._readers[rname] = reader
        self._reader_list = list(self._readers.values())
        self._ckpt_heads[rname] = state.head  # loaded from disk, or about to be written
        return reader

    # ------------------------------------------------------------------ readers
    def reader(self, name: str, config: ReaderConfig | None = None) -> Reader:
        """The reader called ``name``, created on first use and remembered across reopens.

        ``config`` applies from now on; its ``start`` only matters when the reader is new.
        """
        validate_name(name, "reader name")
        # its checkpoint's temp file ".<queue>.read.<reader>.tmp" must fit NAME_MAX (255 bytes)
        if len(self.name) + len(name) > 244:
            raise InvalidName(
                f"reader name {name[:20]!r}... is too long for queue {self.name[:20]!r}...: queue and "
                f"reader names may total at most 244 characters, got {len(self.name) + len(name)}"
            )
        if config is not None and not isinstance(config, ReaderConfig):
            raise TypeError(f"config must be a ReaderConfig, not {type(config).__name__}")
        with self._ckpt_lock:
            with self._lock:
                self._check_open()
                existing = self._readers.get(name)
                if existing is not None:
                    if config is not None:
                        existing.config = config
                        self._kick.set()  # its time-driven policies may start now
                    return existing
                cfg = config or ReaderConfig()
                head = self._start_id(cfg.start)
                reader = self._add_reader(name, cfg, CheckpointData(head))
                state = reader._checkpoint_locked()
                names = list(self._readers)
            # durable before we return: the reader exists even if we crash right after
            ckp.write_checkpoint(ckp.checkpoint_path(self.path, self.name, name), state, self.config.file_mode)
            ckp.write_registry(ckp.registry_path(self.path, self.name), names, self.config.file_mode)
        return reader

    def _start_id(self, start: object) -> int:
        journal = self._journal
        if start == "earliest":
            return journal.first_id()
        if start == "latest":
            return journal.next_id
        if isinstance(start, int):
            return min(max(start, journal.first_id()), journal.next_id)
        assert isinstance(start, (float, _dt.datetime))
        return journal.locate_time(_to_ms(start))

    def readers(self) -> list[str]:
        """Names of the existing readers, sorted."""
        with self._lock:
            return sorted(self._readers)

    def remove_reader(self, name: str) -> None:
        """Delete a reader and its checkpoint; its open reads are dropped, its waiters get
        :class:`QueueClosed`.  Journal files only it was holding become archivable."""
        with self._ckpt_lock:
            with self._lock:
                # once closed the directory may belong to someone else: touch nothing in it
                self._check_open()
                reader = self._readers.pop(name, None)
                if reader is None:
                    raise UnknownReader(f"no reader named {name!r}")
                self._reader_list = list(self._readers.values())
                self._ckpt_heads.pop(name, None)
                reader._close_locked()
                names = list(self._readers)
                self._archive_wanted = True
            ckp.write_registry(ckp.registry_path(self.path, self.name), names, self.config.file_mode)
            try:
                fileio.ops.unlink(ckp.checkpoint_path(self.path, self.name, name))
                fileio.ops.fsync_dir(self.path)
            except FileNotFoundError:
                pass

    # ------------------------------------------------------------------ putting
    def put(
        self,
        data: bytes | bytearray | memoryview,
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
    ) -> int:
        """Append one item; return its id.  Durable on return as the sync policy says."""
        if type(data) is bytes and expire_at is None and ttl is None and len(data) <= self.config.max_item_size:
            # perf: the plain case skips put_many's batch checks; the work is the same _append
            return self._append([data], len(data), time.time_ns() // 1_000_000, 0, None)
        return self.put_many((data,), expire_at=expire_at, ttl=ttl)[0]

    def put_many(
        self,
        items: Iterable[bytes | bytearray | memoryview],
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
    ) -> list[int]:
        """Append several items with one write (and, under ``sync="always"``, one fsync).

        All or nothing: a bad item (wrong type, too large) raises before anything is written.
        """
        limit = self.config.max_item_size
        payloads = cast("list[bytes]", list(items))  # checked just below
        # perf: plain bytes within the limit (the usual case) are checked with two C-level
        # passes; anything else goes through _as_payload item by item (same errors as before).
        if not payloads:
            return []
        if not (set(map(type, payloads)) == _JUST_BYTES and max(map(len, payloads)) <= limit):
            payloads = [_as_payload(d, limit) for d in payloads]
        add_ms = time.time_ns() // 1_000_000
        expire_ms = 0
        if expire_at is not None and ttl is not None:
            raise ValueError("give expire_at or ttl, not both")
        if ttl is not None:
            expire_ms = add_ms + int(ttl * 1000)
        elif expire_at is not None:
            expire_ms = _to_ms(expire_at)
        expire = expire_ms / 1000.0 if expire_ms else None
        first_id = self._append(payloads, sum(map(len, payloads)), add_ms, expire_ms, expire)
        return list(range(first_id, first_id + len(payloads)))

    def _append(
        self, payloads: list[bytes], nbytes: int, add_ms: int, expire_ms: int, expire: float | None
    ) -> int:
        """The one place items enter the queue (``put`` and ``put_many``): policies, journal,
        counters, readers, then the durability wait.  Returns the first id."""
        with self._lock:
            self._check_open()
            if self._reader_list:
                # max_items/max_size: refuse (writing nothing) or discard, before appending
                policies.make_room_locked(self._reader_list, len(payloads), nbytes)
            one = len(payloads) == 1 and not expire_ms  # perf: the plain single put
            if one:
                first_id, add_ms, seq = self._journal.append_one(payloads[0], add_ms)
            else:
                first_id, add_ms, seq = self._journal.append(payloads, add_ms, expire_ms)
            self._put_count += len(payloads)
            self._put_bytes += nbytes
            if self._reader_list:
                add_time = add_ms / 1000.0
                # perf: Item(...) without attrs' __init__
                if one:
                    made = [new_item(first_id, payloads[0], add_time, None, 0)]
                else:
                    made = new_items(first_id, payloads, add_time, expire)
                for reader in self._reader_list:
                    reader._on_put_locked(made, nbytes)
        if self.config.sync == "always":
            self._journal.wait_durable(seq)
        return first_id

    def sync(self) -> None:
        """Return once everything put so far is on stable storage (any sync policy)."""
        self._check_open()
        self._journal.sync()

    # ------------------------------------------------------------------ asyncio and wrappers
    async def aput(
        self,
        data: bytes | bytearray | memoryview,
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
    ) -> int:
        """``await q.aput(data)``: :meth:`put` without blocking the event loop (under
        ``sync="always"`` the durable put runs in the loop's default executor)."""
        return await _aio.aput(self, data, expire_at=expire_at, ttl=ttl)

    async def aput_many(
        self,
        items: Iterable[bytes | bytearray | memoryview],
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
    ) -> list[int]:
        """``await q.aput_many(items)``: :meth:`put_many` without blocking the event loop."""
        return await _aio.aput_many(self, items, expire_at=expire_at, ttl=ttl)

    def blocking_queue(self, reader: Reader | str, serializer: Serializer | None = None) -> BlockingQueue[Any]:
        """libkestrel's non-transactional view of one reader: ``get`` commits immediately, ``put``
        returns once durable per the sync policy.  Payloads are raw bytes unless ``serializer``
        (e.g. ``pickle``) is given.  See :mod:`journaled.wrappers`."""
        return BlockingQueue(self, reader, serializer)

    def transactional_queue(
        self, reader: Reader | str, serializer: Serializer | None = None
    ) -> TransactionalQueue[Any]:
        """libkestrel's transactional view of one reader: ``get`` returns a
        :class:`~journaled.wrappers.Transaction` with ``item``, ``commit()`` and ``rollback()``."""
        return TransactionalQueue(self, reader, serializer)

    # ------------------------------------------------------------------ background
    def _head_moved(self) -> None:
        self._archive_wanted = True

    def _background(self) -> None:
        interval = self.config.sync_interval
        next_ckpt = time.monotonic() + self.config.checkpoint_interval
        while not self._stop.is_set():
            now = time.monotonic()
            wait = next_ckpt - now
            if interval is not None:
                wait = min(wait, interval)
            with self._lock:
                timed = any(policies.uses_time_policies(r) or r._disposing for r in self._reader_list)
            if timed:
                wait = min(wait, policies.POLICY_TICK)
            self._kick.wait(max(0.0, wait))  # set by close() and by items bound for a sink
            self._kick.clear()
            if self._stop.is_set():
                return
            try:
                if timed or self._kick_pending():
                    policies.tick(self, self._disposal_lock)
                if interval is not None and self._journal.dirty:
                    self._journal.sync()
                if time.monotonic() >= next_ckpt:
                    self.checkpoint()
                    next_ckpt = time.monotonic() + self.config.checkpoint_interval
                if self._spool.has_work():
                    self._adopt_spool()
                if self._archive_wanted:
                    self._archive()
            except (JournaledError, OSError) as exc:
                log.error("background maintenance of %s failed: %s", self.path, exc)
            except Exception:
                # a bug must not silently end flushing, checkpoints and archiving for good:
                # log it with its traceback and keep the thread alive for the next round
                log.exception("background maintenance of %s failed unexpectedly", self.path)
                self._stop.wait(0.1)  # never spin on a fault that repeats every round

    def _policy_kick(self) -> None:
        """An item is bound for a sink: have the background thread hand it over soon."""
        self._kick.set()

    def _kick_pending(self) -> bool:
        with self._lock:
            return any(r._disposing for r in self._reader_list)

    def run_policies(self) -> None:
        """Apply time-driven reader policies now: expire items at the readers' heads, abort reads
        open longer than ``open_read_timeout``, and hand items bound for ``expire_to`` /
        ``dead_letter`` to those sinks.  The background thread does this every
        ``policies.POLICY_TICK`` seconds; call it to make tests and tools deterministic."""
        self._check_open()
        policies.tick(self, self._disposal_lock)

    def stats(self) -> QueueStats:
        """A snapshot of the queue and every reader (no I/O; see :class:`QueueStats`)."""
        return queue_stats(self)

    def checkpoint(self) -> None:
        """Write the checkpoint of every reader whose state changed (the background thread does
        this every ``checkpoint_interval``; close does it too)."""
        with self._ckpt_lock:
            with self._lock:
                todo = []
                for reader in self._reader_list:
                    if reader._dirty:
                        todo.append((reader.name, reader._checkpoint_locked()))
                        reader._dirty = False
            if not todo:
                return
            written = 0
            try:
                # A checkpoint must never claim more than the journal durably holds.
                if self.config.sync != "never" and self._journal.dirty:
                    self._journal.sync()
                for rname, state in todo:
                    ckp.write_checkpoint(
                        ckp.checkpoint_path(self.path, self.name, rname), state, self.config.file_mode
                    )
                    written += 1
            except BaseException:
                # not written: the next checkpoint must try again, or an idle reader's file
                # would stay stale (and hold back archiving) until its state changed again
                with self._lock:
                    for rname, _state in todo[written:]:
                        pending = self._readers.get(rname)
                        if pending is not None:
                            pending._dirty = True
                raise
            with self._lock:
                for rname, state in todo:
                    if self._ckpt_heads.get(rname, state.head) < state.head:
                        self._ckpt_heads[rname] = state.head
                        self._archive_wanted = True

    def _adopt_spool(self) -> int:
        """Adopt batches other processes left in the spool folder (see spool.py)."""
        return self._spool.adopt(QueueHost(self))

    def adopt_spool(self) -> int:
        """Adopt waiting spool batches now (the background thread does this on its own);
        return the number of items added."""
        self._check_open()
        return self._adopt_spool()

    def _archive(self) -> None:
        external = read_bookmarks(self.path)  # out-of-process readers (see bookmarks.py)
        # Under the checkpoint lock: a reader being created with start="earliest" must not have
        # its first files deleted between choosing its head and becoming one of the heads here.
        with self._ckpt_lock:
            with self._lock:
                self._archive_wanted = bool(external)  # their heads move without telling us
                if not self._reader_list:
                    return  # with no readers, everything is kept for the first one
                # Checkpointed heads, not live ones: after a crash every checkpoint still points
                # into the journal, so recovery never has to clamp a head that was fine.
                heads = [self._ckpt_heads.get(r.name, 0) for r in self._reader_list]
                min_head = min(heads + list(external.values()))
            files = self._journal.archivable(min_head)
            if files:
                self._journal.archive(files, self._archive_dir)

    # ------------------------------------------------------------------ misc
    @property
    def recovery_report(self) -> list[RecoveryEvent]:
        """What recovery did when the journal was opened (and damage met since)."""
        return list(self._journal.recovery_report)

    @property
    def fsync_count(self) -> int:
        """Number of group-commit fsync rounds so far (a measure of batching)."""
        return self._journal.commits.fsyncs

    @property
    def closed(self) -> bool:
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise QueueClosed(f"queue {self.path!r} is closed")

    def close(self) -> None:
        """Flush and sync the journal, write every reader's checkpoint, release the directory.

        Waiting ``get`` calls are woken with :class:`QueueClosed`.  Idempotent; a second
        concurrent call returns only once the first has released the directory.
        """
        with self._lock:
            if self._closed:
                closing = self._close_done
            else:
                closing = None
                self._closed = True
        if closing is not None:
            if threading.current_thread() is not self._bg:
                closing.wait()
            return
        with self._lock:
            for reader in self._reader_list:
                reader._close_locked()
            for reader in self._reader_list:
                reader._dirty = True  # always leave a fresh checkpoint behind
        self._stop.set()
        self._kick.set()
        if threading.current_thread() is not self._bg:
            self._bg.join()
        try:
            # items already bound for a sink reach it before the final checkpoint commits them
            policies.run_disposals(self, self._disposal_lock)
        except Exception:
            log.exception("handing items to expire_to/dead_letter sinks on close failed")
        try:
            try:
                self._journal.sync()
            except JournaledError as exc:
                log.error("final sync of %s failed: %s", self.path, exc)
            else:
                self.checkpoint()
        finally:
            try:
                self._journal.close()
            finally:
                os.close(self._lock_fd)
                self._close_done.set()

    def __enter__(self) -> JournaledQueue:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"next_id={self._journal.next_id}"
        return f"<JournaledQueue {self.path!r} {state}>"
