"""Monitoring snapshots: ``reader.stats()`` and ``queue.stats()``.

Both are built from counters the reader core and journal already keep, under the queue lock and
with no I/O, so calling them every second from a monitoring thread costs microseconds.  What is exact
and what is an estimate is documented per field (and in docs/design.md, "Reader policies").
A reader's totals (``put``, ``delivered``, ``committed``, ...) are kept in its checkpoint and
outlive the owning process (docs/design.md, "Stats", says which are exact after a kill -9); the
queue's ``put`` and ``bytes_put`` count since the owner opened it.  A reader whose head item
keeps failing is flagged (:attr:`ReaderStats.poison`, and :attr:`Health.poison_readers` for the
queue) once that item has failed more than :data:`POISON_ERRORS` times.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

import attrs

from journaled.core import policies
from journaled.item import Item

if TYPE_CHECKING:
    from journaled.core.readercore import ReaderCore
    from journaled.remote.server import Server

#: seconds of computing after which :class:`Turns` lets the other threads run
TURN = 0.001
#: seconds of each such pause (the kernel's timer slack makes it a little longer)
BREATH = 0.0001


class Turns:
    """Gives the process's other threads their turn during a long computation in Python.

    A thread that only computes keeps the GIL until the interpreter's switch interval (5 ms)
    forces it out, and a put needs the GIL several times (to append, then after its fsync), so a
    snapshot or render of thousands of readers running beside puts would add up to 5 ms to each
    of those steps.  Call :meth:`tick` once per small unit of work (a reader, a line): about
    every :data:`TURN` seconds of work it sleeps :data:`BREATH` seconds, a real sleep, which hands
    the GIL to a thread waiting for it (a mere ``sleep(0)`` is usually won back at once).  The
    work gets about 10% slower; a put beside it waits about a millisecond at most per step."""

    __slots__ = ("last", "count")

    #: ticks between two looks at the clock
    CHECK_EVERY = 16

    def __init__(self) -> None:
        self.last = time.perf_counter()
        self.count = 0

    def tick(self) -> None:
        """One unit of work done: pause if the stretch since the last pause is long enough."""
        self.count += 1
        if self.count < self.CHECK_EVERY:
            return
        self.count = 0
        if time.perf_counter() - self.last >= TURN:
            time.sleep(BREATH)
            self.last = time.perf_counter()


#: A reader is flagged (:attr:`ReaderStats.poison`) when its head item, the oldest it has not
#: committed, has failed (been aborted or timed out) more than this many times.
POISON_ERRORS = 5


@attrs.frozen
class PoisonItem:
    """A reader's head item that has failed more than :data:`POISON_ERRORS` times: it holds the
    reader's head (and checkpoint) back, and is retried at a bounded rate
    (:func:`journaled.core.retry.floor`) until it is committed or dead-lettered.

    Attributes:
        id: the item's id (the reader's ``head``).
        error_count: how many times it has failed (its ``error_count``).
    """

    id: int
    error_count: int


def _poison(value: PoisonItem | dict[str, int] | None) -> PoisonItem | None:
    """A :class:`PoisonItem` from itself, or from its fields as a dict (a snapshot sent over
    the owner's socket as JSON)."""
    return PoisonItem(**value) if isinstance(value, dict) else value


def _names(names: Iterable[str]) -> tuple[str, ...]:
    """Field names as a tuple (a list when the snapshot came from the owner as JSON)."""
    return tuple(names)


@attrs.frozen
class ReaderStats:
    """A snapshot of one reader.

    Attributes:
        name: the reader's name.
        head: every id below it is committed.
        items_waiting: items neither committed, open nor being handed to a sink (exact).
        items_delayed: of those, aborted items waiting out a delay (``abort(item, delay=...)``,
            ``retry_delay``) before they are delivered again.
        items_not_due: of those, items put with a ``not_before`` (or ``delay``) still ahead, held
            back until then (in memory, like delayed ones; not in ``items_delayed``).  Counted
            once the reader has met them: at their put, or, put while it reads behind or before
            a reopen, once read back from disk (until then they are among ``items_on_disk``).
        items_in_memory / bytes_in_memory: the waiting items held in memory (exact), those
            behind a busy key included.
        items_on_disk / bytes_on_disk: the waiting items only on disk, read back later
            (items exact; bytes exact within a session, an over-estimate after reopen).
        bytes_waiting: ``bytes_in_memory + bytes_on_disk``.
        open_reads / bytes_open: reads handed out and not yet committed or aborted (exact).
        backlog_items: what ``max_items`` limits: every uncommitted item, open ones included
            (exact, also after reopen).
        backlog_bytes: what ``max_size`` limits (see ``backlog_bytes_exact``).
        backlog_bytes_exact: False after a reopen until every uncommitted item has been read
            back into memory (or none is left): until then the size is estimated from journal
            offsets, never an under-estimate.
        oldest_age: seconds since the oldest waiting item was added, or None if none waits.
            Exact when that item is in memory; if it is only on disk, the age of the journal file
            holding it (an upper bound).
        oldest_uncommitted_age: the same for the oldest item not yet committed: waiting, delayed
            or open (a read handed out and not settled), or None if there is none.  An item held
            open by a stuck consumer shows here and not in ``oldest_age``.
        waiters: calls blocked in ``get`` on this reader right now (threads, coroutines, and the
        items_behind_keys: of the waiting items, those held back by key order
            (``ReaderConfig.key_order``): an earlier item of their key is open, delayed or not
            due yet.  In memory (counted in ``items_in_memory``).  0 with key order off.
        oldest_key_wait: seconds the longest-waiting of those has waited behind its key, or
            None when none waits.
            owner's threads serving other processes' blocking reads).
        full: a put of one more item would be refused (or would discard) right now.
        put: items put since this reader was created (from the journal's ids: exact).
        delivered / committed / aborted: as the names say (aborted includes timed-out reads).
        timed_out: open reads aborted by ``open_read_timeout``.
        expired / discarded / dead_lettered: items removed by those policies.
        rejected: items given up on with ``reader.reject`` (not counted in ``dead_lettered``).
        poison: the head item when it has failed more than :data:`POISON_ERRORS` times and is
            still to be delivered (waiting, open or delayed; not once it is committed or on its
            way to a sink), else None.  Error counts are in the checkpoint, so a reopened reader
            is flagged at once.
        items_lost_to_retention: uncommitted items this reader lost because their journal files
            were past the queue's retention (``QueueConfig.retention_age`` /
            ``retention_bytes``) and archived before it read them (each gap is also logged with
            its ids).  Counted by the owning process since it opened the queue.
        sinks_missing: the stored sinks (``"dead_letter"``, ``"expire_to"``) this owner runs
            the reader without -- a callable of another process, a destination queue it could not
            open -- so the policy that sends items there is suspended and those items stay in
            the reader (docs/design.md, "Durable settings"); empty when it has every stored sink.
        stopped: why the reader cannot read on, or None: it reached a valid record of a type
            this version must understand and does not (written by a newer journaled;
            docs/format.md [F-11]).  Every item before that record is delivered, then ``get``
            raises :class:`~journaled.errors.UnsupportedVersion`.
    """

    name: str
    head: int
    items_waiting: int
    items_delayed: int
    items_in_memory: int
    bytes_in_memory: int
    items_on_disk: int
    bytes_on_disk: int
    bytes_waiting: int
    open_reads: int
    bytes_open: int
    backlog_items: int
    backlog_bytes: int
    backlog_bytes_exact: bool
    oldest_age: float | None
    full: bool
    put: int
    delivered: int
    committed: int
    aborted: int
    timed_out: int
    expired: int
    discarded: int
    dead_lettered: int
    rejected: int
    poison: PoisonItem | None = attrs.field(default=None, converter=_poison)
    items_lost_to_retention: int = 0
    sinks_missing: tuple[str, ...] = attrs.field(default=(), converter=_names)
    oldest_uncommitted_age: float | None = None
    waiters: int = 0
    items_not_due: int = 0
    stopped: str | None = None
    items_behind_keys: int = 0
    oldest_key_wait: float | None = None


@attrs.frozen
class Health:
    """Is the queue accepting writes, and is its background work succeeding?

    Attributes:
        ok: puts are accepted, no background step is failing, no reader is held by a poison
            item (``poison_readers`` is empty), and no entry of ``external/`` is skipped
            (``skipped_entries`` is empty).
        poisoned: why the queue refuses writes (the first I/O error, or that its directory is
            gone), or None while it accepts them.  Permanent until the queue is reopened.
        poisoned_since: when that started (epoch seconds), or None.
        directory_gone: the queue's directory or the journal file being written was removed or
            replaced under it (then ``poisoned`` says which).
        failing: background steps failing right now (``"flush"``, ``"checkpoint"``,
            ``"maintenance"``, ``"directory check"``, ``"policies"``); each is retried with backoff.
        errors: background failures since the queue was opened.
        last_error: the most recent background failure, as ``"<step>: <error>"``, or None.
        last_error_at: when it happened (epoch seconds), or None.
        poison_readers: the readers whose head item has failed more than :data:`POISON_ERRORS`
            times (:attr:`ReaderStats.poison`), sorted; filled in by :class:`QueueStats` from its
            readers.
        sinkless_readers: the readers running without a stored sink
            (:attr:`ReaderStats.sinks_missing`: a policy suspended, its items kept), sorted;
            filled in by :class:`QueueStats` like ``poison_readers``, and ``ok`` is False while
            there are any.
        stopped_readers: the readers that cannot read on (:attr:`ReaderStats.stopped`: a record
            of a newer format), sorted; filled in like ``poison_readers``, and ``ok`` is False
            while there are any.
        skipped_entries: the entries of the queue directory's ``external/`` that the owner's
            last archiving pass skipped because they are not regular files (a FIFO, a device,
            a socket: never opened, as a FIFO would block), sorted, each name escaped as a
            terminal may show it (:func:`journaled.format.display.escape`).  ``ok`` is False
            while there are any: whatever stands there is not read as a bookmark, so an
            external reader it was meant for is not protected from archiving.  Cleared by the
            first archiving pass after it is removed (within ``checkpoint_interval``).
    """

    ok: bool = True
    poisoned: str | None = None
    poisoned_since: float | None = None
    directory_gone: bool = False
    failing: tuple[str, ...] = ()
    errors: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    poison_readers: tuple[str, ...] = ()
    sinkless_readers: tuple[str, ...] = ()
    stopped_readers: tuple[str, ...] = ()
    skipped_entries: tuple[str, ...] = attrs.field(default=(), converter=_names)


@attrs.frozen
class ClientStats:
    """One other process using this queue through its owner (docs/design.md, "Many processes").

    Attributes:
        pid: the client's process id (from the socket's peer credentials).
        connections: its open connections (one per thread calling at once).
        open_reads: reader name -> reads it holds open now; aborted if it disconnects.
    """

    pid: int
    connections: int
    open_reads: dict[str, int] = attrs.field(factory=dict)


@attrs.frozen
class OpenRead:
    """One read handed out and not yet committed or aborted (see ``JournaledQueue.open_reads``).

    Attributes:
        reader: the reader it was read from.
        id: the item's id.
        age: seconds since the item was put (what ``oldest_uncommitted_age`` counts).
        client: the pid of the other process holding it through the owner, or None when the
            owning process itself holds it.
    """

    reader: str
    id: int
    age: float
    client: int | None = None


@attrs.frozen
class QueueStats:
    """A snapshot of a queue and all its readers.

    Attributes:
        name / path: the queue's name and directory.
        next_id: the id the next put will get.
        put / bytes_put: items and payload bytes put since the owning process opened the queue
            (not persisted; ``next_id - 1`` items were put since the queue was created).
        journal_files: journal files in the directory (the one being written included).
        journal_bytes: bytes of those files, including what is buffered and not yet written.
        readers: one :class:`ReaderStats` per reader, sorted by name.
        health: whether the queue accepts writes, its background work succeeds and no reader is
            held by a poison item (:class:`Health`; its ``poison_readers`` and ``ok`` are made
            to agree with ``readers`` when the snapshot is built).
        clients: the other processes using the queue through this owner (:class:`ClientStats`).
    """

    name: str
    path: str
    next_id: int
    put: int
    bytes_put: int
    journal_files: int
    journal_bytes: int
    readers: tuple[ReaderStats, ...]
    health: Health = Health()
    clients: tuple[ClientStats, ...] = ()

    def __attrs_post_init__(self) -> None:
        """``health`` as given (the engine's, or the owner's over its socket), with the readers'
        poison flags: ``poison_readers`` from ``readers``, and ``ok`` False when there are any."""
        poison = tuple(r.name for r in self.readers if r.poison is not None)
        sinkless = tuple(r.name for r in self.readers if r.sinks_missing)
        stopped = tuple(r.name for r in self.readers if r.stopped is not None)
        health = self.health
        if (poison, sinkless, stopped) != (
            health.poison_readers,
            health.sinkless_readers,
            health.stopped_readers,
        ):
            ok = health.ok and not poison and not sinkless and not stopped
            health = attrs.evolve(
                health, poison_readers=poison, sinkless_readers=sinkless, stopped_readers=stopped, ok=ok
            )
            object.__setattr__(self, "health", health)


def open_reads(
    lock: AbstractContextManager[Any], cores: Iterable[ReaderCore], server: Server | None, limit: int | None
) -> list[OpenRead]:
    """The open reads of ``cores`` (under ``lock``, the queue lock), oldest item first, at most
    ``limit``, each with the pid of the process holding it through ``server``, if one does."""
    with lock:
        holders = server.read_holders() if server is not None else {}
        now = time.time()
        reads = [
            OpenRead(c.name, i, max(0.0, now - it.add_time), holders.get((c.name, i)))
            for c in cores
            for i, it in c.open.items()
        ]
    return sorted(reads, key=lambda r: -r.age)[:limit]


def reader_sinks(lock: AbstractContextManager[Any], cores: Iterable[ReaderCore]) -> list[object]:
    """The dead-letter and ``expire_to`` sinks of ``cores`` (queues or callables), each once,
    read under ``lock`` (the queue lock)."""
    with lock:
        found = [s for c in cores for s in (c.config.dead_letter, c.config.expire_to) if s is not None]
    return list({id(s): s for s in found}.values())


def readers_in_turns(
    lock: AbstractContextManager[Any],
    cores: Iterable[ReaderCore],
    current: Callable[[ReaderCore], bool],
    sinks_missing: Callable[[ReaderCore], tuple[str, ...]],
    now: float,
) -> tuple[ReaderStats, ...]:
    """Every reader's snapshot, taking ``lock`` (the queue lock) reader by reader, not across
    them all, with turns for the other threads (:class:`Turns`) between: a put waits for one
    reader's snapshot at most.  Each is consistent by itself; together they are not one instant.
    A core for which ``current`` is False (its reader removed since) is left out."""
    readers: list[ReaderStats] = []
    turns = Turns()
    for core in cores:
        with lock:
            if current(core):
                readers.append(reader_stats(core, now, sinks_missing(core)))
        turns.tick()  # outside the lock: a put waiting for the GIL runs now and then
    return tuple(readers)


def reader_stats(
    core: ReaderCore, now: float | None = None, sinks_missing: tuple[str, ...] = ()
) -> ReaderStats:
    """Build a reader's snapshot (caller holds the queue lock, ``core.lock``); ``sinks_missing``:
    its stored sinks this owner lacks (the owner layer knows them)."""
    if now is None:
        now = time.time()
    backlog = core.backlog_items()
    backlog_bytes = core.backlog_payload()
    in_flight = len(core.open) + len(core.disposing)
    waiting = max(0, backlog - in_flight)
    open_bytes = sum(len(it.data) for it in core.open.values())
    disposing_bytes = sum(len(it.data) for it, _sink in core.disposing.values())
    parked_bytes = not_due = 0
    for it in core.parked.values():
        parked_bytes += len(it.data)
        if type(it) is not Item and (nb := it.not_before) is not None and nb > now:
            not_due += 1  # an aborted item was delivered, so its not_before has passed
    keys = core.keys
    behind = 0 if keys is None else keys.count  # items behind a busy key: in memory too
    mem_bytes = core.mem_bytes + parked_bytes + (0 if keys is None else keys.nbytes)
    waiting_bytes = max(mem_bytes, backlog_bytes - open_bytes - disposing_bytes)
    spilled = 0 if keys is None else keys.spilled  # behind a busy key, but on disk only
    in_mem = len(core.mem) + len(core.parked) + behind - spilled  # parked items are in memory too
    oldest: float | None = None
    if core.mem:
        oldest = max(0.0, now - core.mem[0].add_time)
    elif waiting:
        oldest = max(0.0, now - core.journal.file_created_s(core.load_id or core.head))
    # open and parked are walked for their bytes above already: the same O(n) again
    times = [it.add_time for it in core.open.values()] + [it.add_time for it in core.parked.values()]
    if core.mem:
        times.append(core.mem[0].add_time)
    if keys is not None:
        times += [line[0].add_time for line in keys.behind.values() if line]  # each line's oldest
    uncommitted = max(0.0, now - min(times)) if times else None
    if waiting > in_mem and not core.mem:  # the oldest waiting item is only on disk
        uncommitted = max(uncommitted or 0.0, oldest or 0.0)
    return ReaderStats(
        name=core.name,
        head=core.head,
        items_waiting=waiting,
        items_delayed=len(core.parked) - not_due,
        items_in_memory=in_mem,
        bytes_in_memory=mem_bytes,
        items_on_disk=max(0, waiting - in_mem),
        bytes_on_disk=waiting_bytes - mem_bytes,
        bytes_waiting=waiting_bytes,
        open_reads=len(core.open),
        bytes_open=open_bytes,
        backlog_items=backlog,
        backlog_bytes=backlog_bytes,
        backlog_bytes_exact=core.backlog_exact,
        oldest_age=oldest,
        full=policies.is_full(core, 1, 0),
        put=max(0, core.journal.next_id - core.put_origin),
        delivered=core.delivered,
        committed=core.committed,
        aborted=core.aborted,
        timed_out=core.timed_out,
        expired=core.expired,
        discarded=core.discarded,
        dead_lettered=core.dead_lettered,
        rejected=core.rejected,
        poison=_head_poison(core),
        items_lost_to_retention=core.lost_to_retention,
        sinks_missing=sinks_missing,
        oldest_uncommitted_age=uncommitted,
        waiters=len(core.waiters),
        items_not_due=not_due,
        stopped=core.stopped,
        items_behind_keys=behind,
        oldest_key_wait=keys.oldest_wait(core.clock.monotonic()) if keys is not None and behind else None,
    )


def _head_poison(core: ReaderCore) -> PoisonItem | None:
    """The head item as a :class:`PoisonItem` if it failed more than :data:`POISON_ERRORS` times
    and is not on its way to a sink (O(1): two dict lookups)."""
    count = core.errors.get(core.head, 0)
    if count <= POISON_ERRORS or core.head in core.disposing:
        return None
    return PoisonItem(core.head, count)
