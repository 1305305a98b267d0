"""JournaledQueue: owns a queue directory, its journal, its named readers and its background work.

Data flows one way: ``put`` -> the journal -> every reader's core (core/readercore.py) -> ``get`` /
``commit`` -> checkpoints.  Here those meet: the one append path, readers, checkpoints, closing.

Locks, and the only order in which they nest (docs/design.md, "Locks")::

    ReaderFiles.lock  ->  _lock (the queue lock)  ->  the journal's lock  ->  group commit's lock

* ``ReaderFiles.lock`` (owner/readerfiles.py) serializes writing and removing checkpoint files and the
  registry, and the archiving decision (a reader being created must not lose its first file).
* ``_lock``, *the queue lock*, guards the order of appends, ``_readers``/``_cores``, the put
  counters and every reader core's state (it is each core's ``lock``).  Never held across an
  fsync or user code; its only I/O is the journal's write-out and read-behind's preads.
* The journal's own lock (log/journal.py) guards its buffer, files and descriptors.  Taken before the
  queue lock, never inside it: ``Engine.disposal_lock`` and the spool adopter's pass lock.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping
from typing import Any, cast

import attrs

from journaled import aio as _aio
from journaled.config import (
    QueueConfig,
    ReaderConfig,
    Sink,
    merge_settings,
    reader_settings,
    validate_name,
)
from journaled.core import seek
from journaled.core.readercore import ReaderCore
from journaled.disk import lifecycle
from journaled.disk.dirlock import DirLock, prepare_queue_dir
from journaled.errors import InvalidName, UnknownReader
from journaled.format import compressed
from journaled.format.smallfiles import CheckpointData
from journaled.log.journal import Journal, RecoveryEvent, detect_queue_name
from journaled.owner import closing, dedup, destinations, reopen
from journaled.owner.adoption import Adopter, QueueAppender
from journaled.owner.destinations import Destinations
from journaled.owner.engine import Engine
from journaled.owner.putpath import PutPath
from journaled.owner.readerfiles import ReaderFiles
from journaled.reader import Reader
from journaled.remote import clientqueue
from journaled.remote.clientqueue import OpenOrConnect
from journaled.remote.server import serve
from journaled.serializers import Serializer
from journaled.stats import OpenRead, QueueStats, open_reads, reader_sinks, readers_in_turns
from journaled.wrappers import BlockingQueue, TransactionalQueue

log = logging.getLogger("journaled")
#: The queues this process owns, by directory: a stored destination that is one of them is used,
#: never opened a second time (that would be ``QueueLocked``).
_OWNED: weakref.WeakValueDictionary[str, JournaledQueue] = weakref.WeakValueDictionary()
_DEFAULTS = reader_settings(ReaderConfig(), "/")  # no sink in it: the directory does not matter


class JournaledQueue(closing.Closing, metaclass=OpenOrConnect):
    """A durable, fan-out, transactional queue stored in one directory.

    ``JournaledQueue(path, config=QueueConfig(...))`` creates the directory if needed (refusing one
    others can write: :class:`UnsafeDirectory`), locks it (a second owner gets :class:`QueueLocked`),
    recovers the journal and the readers' checkpoints, and starts its background work (flushing,
    checkpoints, archiving, reader policies).  Use it as a context manager or call :meth:`close`.
    In another process, while this one owns the directory, it is a client of it (remote/clientqueue.py).
    """

    is_owner = True  #: this process owns the directory (a client's is a RemoteQueue's property)
    __reduce__ = clientqueue.reduce_owner  # pickled, it is opened by path in the other process

    def __init__(
        self,
        path: str | os.PathLike[str],
        config: QueueConfig | None = None,
        *,
        name: str | None = None,
    ) -> None:
        if not os.fspath(path):  # an unset variable, say: it would make the working directory a queue
            raise ValueError("path is empty: name the queue's directory")
        self.path = os.path.abspath(os.fspath(path))
        self.config = config if config is not None else QueueConfig()
        if not isinstance(self.config, QueueConfig):
            raise TypeError(f"config must be a QueueConfig, not {type(self.config).__name__}")
        if self.config.compression == "zstd":  # refused before the directory or the setting exists
            compressed.require(self.path)
        prepare_queue_dir(self.path, self.config.allow_shared_dir)
        self._closed, self._forked = True, False  # closed until opened: __del__ leaves it alone
        self._dirlock = DirLock.acquire(self.path)
        try:
            self.name = (
                validate_name(name, "queue name") if name is not None else detect_queue_name(self.path)
            )
            self._lock = threading.Lock()
            self._close_done = threading.Event()
            registered, states = reopen.read_states(self.path, self.name)
            self._journal = Journal(self.path, self.name, self.config, id_floor=reopen.id_floor(states))
            self._readers: dict[str, Reader] = {}
            self._cores: list[ReaderCore] = []
            self._files = ReaderFiles(
                self.path,
                self.name,
                self.config,
                self._journal,
                self._lock,
                lifecycle.weakly(self, lambda q: q._cores, []),  # cores hold _files: never self
                lifecycle.weakly(self, lambda q: q._save_dedup_index(), None),
            )
            window = self._files.dedup_window  # the stored one, after this open's config applied
            self._journal.compress_as_stored(self._files.settings.queue)
            self._put = PutPath(self.path, self._lock, self._journal, self.config, window)
            self._append_locked = self._put.append_locked
            weak = lifecycle.weakly  # the threads must not keep an abandoned queue alive
            self._engine = Engine(
                self.name,
                self._lock,
                weak(self, lambda q: q._cores, []),
                self._journal,
                self.config.sync_interval,
                self.config.checkpoint_interval,
                weak(self, lambda q: q.checkpoint(), None),
                weak(self, lambda q: q._maintain(), None),
                weak(self, lambda q: q._closed, True),
            )
            first, end = self._journal.first_id(), self._journal.next_id
            # every reader runs with its stored settings (docs/design.md, "Durable settings"); a
            # destination queue this opens is closed with this one
            self._destinations = Destinations(self.path, _OWNED, JournaledQueue)
            _OWNED[self.path] = self
            for rname, state in states.items():
                # stacklevel 5 (through OpenOrConnect): the warning names the line that opened the queue
                cfg = reopen.stored_config(rname, self._files.stored(rname), self._destinations.provide, 5)
                self._add_reader(rname, cfg, reopen.fit_to_journal(rname, state, first, end))
            if registered is None or set(registered) != set(states):
                self._files.write_registry(list(states))
            self._spool = Adopter(self.path)
            self._adopt_spool()  # before anyone else appends: recovery arithmetic needs that
            # only now: a destination queue opened above may name this one (a cycle), and its
            # sink thread hands nothing to a closed queue (owner/destinations.py)
            self._closed = False
            self._destinations.opened()
        except BaseException:
            self._closed = True  # a failed open leaves no descriptor and no lock behind
            self._forget_owned()
            closing.undo_open(self.__dict__.get("_journal"), self._dirlock)
            self._close_destinations()
            raise
        self._engine.start()
        self._engine.watch_directory(
            self._dirlock.lease, self._journal, weak(self, lambda q: q._files.want_archiving(), None)
        )
        self.server = serve(self, self._dirlock)  # other processes' calls (remote/server.py)
        lifecycle.track(self, lambda q: q._close(wake=False), JournaledQueue._forget_in_child)

    def _close_destinations(self) -> None:
        dest = self.__dict__.get("_destinations")
        if dest is not None:
            dest.close()

    def _forget_owned(self) -> None:
        if _OWNED.get(self.path) is self:
            del _OWNED[self.path]

    def _add_reader(self, rname: str, config: ReaderConfig, state: CheckpointData) -> Reader:
        core = ReaderCore(
            rname, config, state, self._lock, self._journal, self._files.want_archiving, self._engine.wake
        )
        reader = Reader(core, self._files)
        self._engine.wake()  # the background thread re-checks which policies need its tick
        self._readers[rname] = reader
        self._cores = [r.core for r in self._readers.values()]
        self._put.readers_changed(self._cores)
        self._files.track(rname, state.head)
        return reader

    # ------------------------------------------------------------------ readers
    def reader(self, name: str, config: ReaderConfig | None = None) -> Reader:
        """The reader called ``name``, created on first use and remembered across reopens.

        Without ``config``, the reader runs with its stored settings (docs/design.md, "Durable
        settings"; the defaults for a reader that never had any).  A ``config`` applies from now
        on and, when it differs from the stored settings, is an explicit change: stored in the
        queue directory (durable before this returns, so every later owner applies it) and
        logged at INFO.  Its ``start`` only places a new reader (for an existing one it is
        ignored, with a ``UserWarning`` if it would have moved it: use :meth:`Reader.seek`).
        """
        closing.check_process(self.path, self._forked)  # before a lock a vanished thread may hold
        validate_name(name, "reader name")
        # its checkpoint's temp file ".<queue>.read.<reader>.tmp" must fit NAME_MAX (255 bytes)
        if len(self.name) + len(name) > 244:
            raise InvalidName(
                f"reader name {name[:20]!r}... is too long for queue {self.name[:20]!r}...: queue and "
                f"reader names may total at most 244 characters, got {len(self.name) + len(name)}"
            )
        if config is not None and not isinstance(config, ReaderConfig):
            raise TypeError(f"config must be a ReaderConfig, not {type(config).__name__}")
        ignored = new = stored = None
        with self._files.lock:  # readers are created and removed only under it: no race below
            self._check_open()  # a closed queue's directory may be someone else's now
            if config is not None:
                settings = reader_settings(config, self.path)
                if self._files.store(name, None if settings == _DEFAULTS else settings):
                    log.info("queue %s: reader %s settings changed to %s", self.path, name, settings)
            elif name not in self._readers:  # outside the queue lock: it may open a destination
                stored = reopen.stored_config(name, self._files.stored(name), self._destinations.provide)
            with self._lock:
                self._check_open()
                existing = self._readers.get(name)
                if existing is not None and config is not None:
                    ignored = seek.ignored_start(existing.core, config.start)
                    existing.core.reconfigure(config)
                    self._engine.wake()  # its time-driven policies may start now
                if existing is None:
                    cfg = config or stored or ReaderConfig()
                    head = seek.start_id(self._journal, cfg.start)
                    existing = self._add_reader(name, cfg, CheckpointData(head))
                    new = (existing.core.checkpoint_state(), list(self._readers))
            if new is not None:  # durable before we return: it exists even if we crash now
                self._files.created(name, *new)
        if ignored is not None:
            warnings.warn(ignored, UserWarning, stacklevel=2)  # outside the locks: it may raise
        return existing

    def reader_settings(self, name: str) -> dict[str, Any]:
        """Reader ``name``'s stored settings (docs/format.md, section 15): every field of
        ``ReaderConfig`` but ``start``, and but ``key_order`` while it is off (stored, and shown,
        as before the field existed, so that older versions read the file), sinks in their stored
        form; the defaults where none are stored.  Raises :class:`UnknownReader` for a reader
        that does not exist."""
        with self._files.lock:
            self._check_open()
            if name not in self._readers:
                raise UnknownReader(f"no reader named {name!r}")
            return dict(self._files.stored(name) or _DEFAULTS)

    def set_reader_settings(self, name: str, changes: dict[str, Any]) -> dict[str, Any]:
        """Change only the settings named in ``changes`` of reader ``name`` (the others stay as
        stored: nothing is dropped that was not named), durably before returning, logged at INFO,
        and applied.  Values as :func:`journaled.config.merge_settings` takes them (a sink may be
        a directory path: a queue's directory, an empty one or a missing one, never one holding
        other things).  Returns the new stored settings.  Raises :class:`UnknownReader`, or
        ``ValueError`` for an unknown field or a bad value (nothing changed)."""
        with self._files.lock:
            self._check_open()
            reader = self._readers.get(name)
            if reader is None:
                raise UnknownReader(f"no reader named {name!r}")
            for field in ("expire_to", "dead_letter"):
                value = changes.get(field)
                if isinstance(value, (str, os.PathLike)):  # a directory: never one of other things
                    problem = destinations.destination_problem(os.path.abspath(os.fspath(value)))
                    if problem is not None:
                        raise ValueError(f"{field}: {problem}")
            merged = merge_settings(self._files.stored(name), changes, self.path)
            live = reader.core.config

            def provide(field: str, spec: dict[str, str]) -> Sink | None:
                if field in changes and not isinstance(changes[field], (str, os.PathLike, dict)):
                    return cast("Sink", changes[field])  # the object given
                if field not in changes and getattr(live, field) is not None:
                    return cast("Sink", getattr(live, field))  # unchanged: the sink in use stays
                return self._destinations.provide(field, spec)

            config = reopen.stored_config(name, merged, provide)
            if self._files.store(name, None if merged == _DEFAULTS else merged):
                log.info("queue %s: reader %s settings changed to %s", self.path, name, merged)
            with self._lock:
                self._check_open()
                reader.core.reconfigure(attrs.evolve(config, start=live.start))
                self._engine.wake()  # its time-driven policies may start now
        return merged

    def readers(self) -> list[str]:
        """Names of the existing readers, sorted."""
        with self._lock:
            return sorted(self._readers)

    def remove_reader(self, name: str) -> None:
        """Delete a reader and its checkpoint; its open reads are dropped, its waiters get
        :class:`QueueClosed`.  Journal files only it was holding become archivable."""
        closing.check_process(self.path, self._forked)
        with self._files.lock:
            with self._lock:
                # once closed the directory may belong to someone else: touch nothing in it
                self._check_open()
                reader = self._readers.pop(name, None)
                if reader is None:
                    raise UnknownReader(f"no reader named {name!r}")
                self._cores = [r.core for r in self._readers.values()]
                self._put.readers_changed(self._cores)
                self._files.forget(name)
                reader.core.close()
                names = list(self._readers)
            self._files.removed(name, names)

    # ------------------------------------------------------------------ putting
    def put(
        self,
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
        """Append one item; return its id.  Durable on return as the sync policy says.

        ``ttl`` (seconds from now) or ``expire_at`` (epoch seconds or a datetime) sets when the
        item expires for every reader; a time at or before now (``0``, ``ttl=0``, a 1970 date)
        stores the item already expired, so it is never delivered.  ``delay`` (seconds from now)
        or ``not_before`` (epoch seconds or a datetime) is the earliest time any reader delivers
        it; later items are not held back behind it.  ``headers`` (str -> bytes) and ``key``
        (bytes) travel with the item (``Item.headers``, ``Item.key``); with
        ``QueueConfig(dedup_window=...)`` a key put within the window returns the first put's id
        and stores nothing (``dedup=False`` stores it regardless).  A negative, NaN, infinite or
        too large value raises ``ValueError``, a non-number ``TypeError``, and nothing is
        written.  Limits: docs/design.md, "Item metadata".
        """
        if expire_at is None and ttl is None and not_before is None and delay is None:
            if key is None and headers is None:
                return self._put.put_plain(data)  # perf: the plain case skips put_one's checks
            return self._put.put_marked(data, headers, key, dedup)  # perf: the usual put with metadata
        return self._put.put_one(data, expire_at, ttl, not_before, delay, headers, key, None, dedup)

    def put_many(
        self,
        items: Iterable[bytes | bytearray | memoryview],
        *,
        expire_at: float | _dt.datetime | None = None,
        ttl: float | None = None,
        not_before: float | _dt.datetime | None = None,
        delay: float | None = None,
        headers: Mapping[str, bytes] | None = None,
        keys: Iterable[bytes | None] | None = None,
        producer: tuple[int, int] | None = None,
        dedup: bool = True,
    ) -> list[int]:
        """Append several items with one write (and, under ``sync="always"``, one fsync).

        ``ttl``/``expire_at``, ``delay``/``not_before`` and ``headers`` apply to every item, as for
        :meth:`put`; ``keys`` gives one key (or None) per item.  ``producer`` is ``(producer id,
        first sequence)``, the tag a client process puts with so that a retry on another owner is
        stored once (item *i* gets sequence ``first + i``): a sequence stored already returns its
        id and only the others are stored.  With ``QueueConfig(dedup_window=...)`` (unless
        ``dedup=False``) an item whose key was put within the window, or earlier in ``items``,
        returns that put's id and is not stored, so the ids are no longer consecutive.  All or
        nothing: a bad item (wrong type, too large) or a bad argument raises before anything is
        written.
        """
        return self._put.put_many(items, expire_at, ttl, not_before, delay, headers, keys, producer, dedup)

    def sync(self) -> None:
        """Return once everything put so far is on stable storage (any sync policy)."""
        self._check_open()
        self._journal.sync()

    def write_out(self) -> None:
        """Return once every item put so far is in the OS (handed over with ``write(2)``, no
        fsync): from then on a kill -9 of this process cannot unmake it, though a power loss
        still can unless it was synced.  **Acknowledged to another process = in the OS**: the
        owner's server calls this before a reply acknowledges a put or carries an item to a
        client (remote/contract.py), so a killed owner never loses a put it acknowledged nor
        gives the id of an item a client holds to a later put.  Cheap when there is nothing
        buffered; the sync policy's own writes and fsyncs go on as before."""
        self._journal.write_out()

    # ------------------------------------------------------------------ asyncio and wrappers
    async def aput(
        self,
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
        """``await q.aput(data)``: :meth:`put` (the same keywords) without blocking the event
        loop (under ``sync="always"`` the durable put runs in the loop's default executor)."""
        return await _aio.aput(
            self,
            data,
            expire_at=expire_at,
            ttl=ttl,
            not_before=not_before,
            delay=delay,
            headers=headers,
            key=key,
            dedup=dedup,
        )

    async def aput_many(
        self,
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
        """``await q.aput_many(items)``: :meth:`put_many` (the same keywords but ``producer``,
        a client's) without blocking the event loop."""
        return await _aio.aput_many(
            self,
            items,
            expire_at=expire_at,
            ttl=ttl,
            not_before=not_before,
            delay=delay,
            headers=headers,
            keys=keys,
            dedup=dedup,
        )

    def blocking_queue(
        self, reader: Reader | str, serializer: Serializer | None = None
    ) -> BlockingQueue[Any]:
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

    # ------------------------------------------------------------------ maintenance
    def _maintain(self) -> None:
        """The background thread's spool adoption and archiving steps."""
        if self._spool.has_work():
            self._adopt_spool()
        if self._files.archive_wanted:
            self._files.archive()

    def _save_dedup_index(self) -> None:
        """Before journal files are archived: the keys of the dedup window, to their own file."""
        dedup.save_index(self._journal, self._put.keys, self._lock, self.config.file_mode)

    def run_policies(self) -> None:
        """Apply time-driven reader policies now: expire items at the readers' heads, abort reads
        open longer than ``open_read_timeout``, and hand items bound for ``expire_to`` /
        ``dead_letter`` to those sinks (on the calling thread).  The background does this every
        ``policies.POLICY_TICK`` seconds; call it to make tests and tools deterministic."""
        self._check_open()
        self._engine.sweep()
        self._engine.dispose_now()

    def stats(self) -> QueueStats:
        """A snapshot of the queue and every reader (no I/O; see :class:`QueueStats`), the queue
        lock taken reader by reader (:func:`~journaled.stats.readers_in_turns`), then for the rest."""
        closing.check_process(self.path, self._forked)
        cores = sorted(self._cores, key=lambda c: c.name)  # a list replaced, never changed: no lock
        current = lambda c: (r := self._readers.get(c.name)) is not None and r.core is c  # noqa: E731
        sinks = lambda c: reopen.unprovided_sinks(self._files.stored(c.name), c.config)  # noqa: E731
        readers = readers_in_turns(self._lock, cores, current, sinks, time.time())
        with self._lock:
            files, nbytes = self._journal.disk_usage()
            return QueueStats(
                name=self.name,
                path=self.path,
                next_id=self._journal.next_id,
                put=self._put.put_count,
                bytes_put=self._put.put_bytes,
                journal_files=files,
                journal_bytes=nbytes,
                readers=readers,
                health=self._engine.health(self._files.skipped_entries),
                clients=self.server.clients() if self.server is not None else (),
            )

    def open_reads(self, limit: int | None = None) -> list[OpenRead]:
        """Reads handed out and not yet settled, oldest item first (at most ``limit``; no I/O)."""
        return open_reads(self._lock, self._cores, self.server, limit)

    def destinations(self) -> list[Any]:
        """Where this queue's readers send dead letters and expired items (queues or callables)."""
        return reader_sinks(self._lock, self._cores)

    def checkpoint(self) -> None:
        """Write the checkpoint of every reader whose state changed (the background thread does
        this every ``checkpoint_interval``; close does it too)."""
        closing.check_process(self.path, self._forked)
        self._files.checkpoint()

    def _adopt_spool(self) -> int:
        return self._spool.adopt(QueueAppender(self._lock, self._append_locked, self._journal, self.config))

    def adopt_spool(self) -> int:
        """Adopt waiting spool batches now (the background thread does this on its own);
        return the number of items added."""
        self._check_open()
        return self._adopt_spool()

    def archive(self) -> None:
        """Archive (delete, or move to ``archive_dir``) the journal files every reader's
        checkpoint and every external bookmark has passed, and those past the queue's retention
        (``QueueConfig.retention_age`` / ``retention_bytes``), now.  The background thread does
        this whenever a checkpoint moved a head, and every ``checkpoint_interval`` while the
        queue has a bookmark or a retention limit.  A queue with no reader archives what every
        bookmark passed; with no reader and no bookmark, only what retention drops (everything
        else is kept for the first reader)."""
        closing.check_process(self.path, self._forked)
        self._files.archive()

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
    def journal(self) -> Journal:
        """The journal (files, reading by id and time); for tools and tests."""
        return self._journal

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called (or in a process forked after the open)."""
        return self._closed

    def _check_open(self) -> None:
        if self._closed:
            raise closing.closed_error(self.path, self._forked)

    def close(self) -> None:
        """Flush and sync the journal, write every reader's checkpoint, release the directory.

        Waiting ``get`` calls are woken with :class:`QueueClosed`.  Items already bound for an
        ``expire_to``/``dead_letter`` sink are handed over first.  Idempotent and callable from
        any thread, a sink included; a second concurrent call returns only once the first has
        released the directory (except on the queue's own threads, which never wait).  Queues
        still open when the interpreter exits are closed then.
        """
        self._close(wake=True)

    def _close(self, wake: bool) -> None:
        if self._forked:
            return  # a forked child: the parent's files, whose copies _forget_in_child dropped
        with self._lock:
            first = not self._closed
            self._closed = True
            self._put.close()
            if first:
                closing.close_readers(self._cores, wake)
        if not first:
            if not self._engine.on_engine_thread():
                self._close_done.wait()
            return
        lifecycle.untrack(self)
        self._forget_owned()
        try:
            closing.close_parts(self._engine, self._journal, self.checkpoint, self._dirlock)
        finally:
            # after close_parts: its last hand-over to the sinks may still put into them
            self._close_destinations()
            self._close_done.set()

    def _forget_in_child(self) -> None:  # every call raises QueueForked from now on
        self._forked = self._closed = True
        self._lock = closing.forget_in_child(self._cores, self._journal)
        self._put.forget_in_child(self._lock)

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"next_id={self._journal.next_id}"
        return f"<JournaledQueue {self.path!r} {state}>"
