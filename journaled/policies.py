"""Per-reader policies: size limits and the full policy, expiry, open-read timeouts, dead letters.

Kept out of reader.py so the reader stays about delivery order.  Every ``*_locked`` function is
called with the queue lock held and does no I/O except what read-behind already does (reading a
reader's next items back from the journal).  User code (sinks) never runs under the lock:
items bound for a sink are parked in ``reader._disposing`` and handed over by
:func:`run_disposals` on the queue's background thread (or on close), then committed.

Design and guarantees: docs/design.md, "Reader policies".
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING

from journaled.config import Sink
from journaled.errors import Full, QueueClosed
from journaled.item import Item
from journaled.record import PUT_OVERHEAD

if TYPE_CHECKING:
    from journaled.journal import Journal
    from journaled.queue import JournaledQueue
    from journaled.reader import Reader

log = logging.getLogger("journaled")

#: The background thread runs time-driven policies (expiry sweep, open-read timeouts) at least
#: this often when some reader uses them.
POLICY_TICK = 0.1
#: Most items one sweep expires from a reader's head, so the lock is never held for long.
SWEEP_LIMIT = 4096


# --------------------------------------------------------------------------- backlog and room
def backlog_items_locked(reader: Reader) -> int:
    """Uncommitted items of ``reader`` (waiting, open or bound for a sink): exact, and derived
    only from durable state, so it is the same after a reopen."""
    return reader._journal.next_id - reader.head - len(reader.done)


def backlog_bytes_locked(reader: Reader) -> int:
    """Payload bytes of the uncommitted items.  Kept incrementally (exact within a session);
    after a reopen it starts as an estimate, made exact again as soon as every uncommitted item
    is in memory (nothing left on disk only) or none is left."""
    if backlog_items_locked(reader) == 0:
        # also corrects ids skipped as lost (journal damage), whose sizes were never known
        reader._backlog_bytes, reader._backlog_exact = 0, True
    elif not reader._backlog_exact:
        if reader._load_id is None:
            total = reader._mem_bytes + sum(len(i.data) for i in reader._open.values())
            total += sum(len(i.data) for i, _s in reader._disposing.values())
            reader._backlog_bytes, reader._backlog_exact = total, True
    return reader._backlog_bytes


def is_full_locked(reader: Reader, n: int, nbytes: int) -> bool:
    """Would ``n`` more items of ``nbytes`` pass this reader's ``max_items``/``max_size``?
    Items already bound for a sink are not charged: they are on their way out."""
    cfg = reader.config
    leaving = reader._disposing
    if cfg.max_items is not None and backlog_items_locked(reader) - len(leaving) + n > cfg.max_items:
        return True
    if cfg.max_size is None:
        return False
    leaving_bytes = sum(len(i.data) for i, _s in leaving.values()) if leaving else 0
    return backlog_bytes_locked(reader) - leaving_bytes + nbytes > cfg.max_size


def make_room_locked(readers: list[Reader], n: int, nbytes: int) -> None:
    """Called by ``put`` before anything is appended: raise :class:`Full` naming the first full
    reader that does not discard (nothing changes then), else discard old items where needed."""
    limited = [r for r in readers if r.config.max_items is not None or r.config.max_size is not None]
    if not limited:
        return
    now = time.time()
    full = []
    for r in limited:
        if is_full_locked(r, n, nbytes):
            # expired items make room before anything is refused (all of memory, not just the head)
            sweep_expired_locked(r, now)
            sweep_expired_in_memory_locked(r, now)
            if is_full_locked(r, n, nbytes):
                full.append(r)
    for r in full:
        if not r.config.discard_old_when_full or not _can_make_room_locked(r, n, nbytes):
            cfg = r.config
            raise Full(
                f"reader {r.name!r} is full ({backlog_items_locked(r)} items, ~{r._backlog_bytes} "
                f"bytes; max_items={cfg.max_items}, max_size={cfg.max_size}); nothing was written"
            )
    for r in full:
        while is_full_locked(r, n, nbytes):
            item = r._pop_waiting_locked()
            if item is None:  # cannot happen after _can_make_room_locked; never loop forever
                raise Full(f"reader {r.name!r} is full and has nothing left to discard")
            r.discarded += 1
            r._settle_locked(item)


def _can_make_room_locked(r: Reader, n: int, nbytes: int) -> bool:
    """Could dropping every waiting item make room?  (Open reads are never discarded.)"""
    cfg = r.config
    pinned = len(r._open)
    if cfg.max_items is not None and pinned + n > cfg.max_items:
        return False
    if cfg.max_size is not None:
        pinned_bytes = sum(len(i.data) for i in r._open.values())
        if pinned_bytes + nbytes > cfg.max_size:
            return False
    return True


# --------------------------------------------------------------------------- expiry
def is_expired(item: Item, max_age: float | None, now: float) -> bool:
    if item.expire_at is not None and item.expire_at <= now:
        return True
    return max_age is not None and item.add_time + max_age <= now


def check_delivery_locked(reader: Reader, item: Item) -> bool:
    """Just before ``item`` is handed out: True if it may be delivered, else it has been
    disposed of (expired or dead-lettered).  Because this runs at delivery itself, an item that
    expires after a sweep is still never delivered, and it cannot wedge the head: it is simply
    taken out and the next item is considered."""
    cfg = reader.config
    if item.expire_at is not None or cfg.max_age is not None:
        if is_expired(item, cfg.max_age, time.time()):
            dispose_locked(reader, item, "expired")
            return False
    if cfg.max_errors is not None and item.error_count >= cfg.max_errors:
        dispose_locked(reader, item, "dead")
        return False
    return True


def sweep_expired_locked(reader: Reader, now: float) -> int:
    """Remove expired items from the head of the reader (in memory, reading back from disk as
    needed), up to ``SWEEP_LIMIT``.  Items expiring out of order behind a live one are caught at
    delivery instead.  Returns how many expired."""
    cfg = reader.config
    count = 0
    while count < SWEEP_LIMIT:
        item = reader._peek_waiting_locked()
        if item is None or not (item.expire_at is not None or cfg.max_age is not None):
            break
        if not is_expired(item, cfg.max_age, now):
            break
        popped = reader._pop_waiting_locked()
        assert popped is item
        dispose_locked(reader, item, "expired")
        count += 1
    return count


def sweep_expired_in_memory_locked(reader: Reader, now: float) -> int:
    """Remove every expired item held in memory, wherever it is (O(items in memory): only used
    when a reader is about to refuse a put)."""
    cfg = reader.config
    if cfg.max_age is None and not reader._saw_expiry:
        return 0
    dead = [it for it in reader._mem if is_expired(it, cfg.max_age, now)]
    if not dead:
        return 0
    gone = {it.id for it in dead}
    kept = [it for it in reader._mem if it.id not in gone]
    reader._mem.clear()
    reader._mem.extend(kept)
    for it in dead:
        reader._mem_bytes -= len(it.data)
        dispose_locked(reader, it, "expired")
    return len(dead)


# --------------------------------------------------------------------------- open reads
def note_opened_locked(reader: Reader, item_id: int) -> None:
    if reader.config.open_read_timeout is not None:
        reader._opened_at.pop(item_id, None)  # re-insert: dict order is delivery order
        reader._opened_at[item_id] = time.monotonic()
        if len(reader._opened_at) == 1:
            reader._queue._policy_kick()  # the background tick may be idle


def sweep_open_reads_locked(reader: Reader, now_mono: float) -> int:
    """Abort reads open longer than ``open_read_timeout``.  ``_opened_at`` is in delivery order,
    so this stops at the first read still within its time; entries of reads already committed
    or aborted are dropped on the way."""
    timeout = reader.config.open_read_timeout
    opened = reader._opened_at
    if timeout is None:
        opened.clear()
        return 0
    count = 0
    for item_id in list(opened):
        since = opened[item_id]
        item = reader._open.get(item_id)
        if item is None:
            del opened[item_id]
            continue
        if now_mono - since < timeout:
            break
        del opened[item_id]
        log.warning(
            "reader %s: read of item %d open for more than %ss; aborted",
            reader.name, item_id, timeout,
        )
        reader.timed_out += 1
        reader._abort_locked(item)
        count += 1
    return count


# --------------------------------------------------------------------------- sinks
def dispose_locked(reader: Reader, item: Item, kind: str) -> None:
    """Take ``item`` out of delivery for good: ``kind`` is ``"expired"`` or ``"dead"``."""
    cfg = reader.config
    if kind == "expired":
        reader.expired += 1
        sink: Sink | None = cfg.expire_to
    else:
        reader.dead_lettered += 1
        sink = cfg.dead_letter
        log.warning(
            "reader %s: item %d aborted %d times (max_errors=%s); %s",
            reader.name, item.id, item.error_count, cfg.max_errors,
            "moved to dead_letter" if sink is not None else "dropped",
        )
    if sink is None:
        reader._settle_locked(item)
        return
    reader._disposing[item.id] = (item, sink)
    reader._queue._policy_kick()


def run_disposals(queue: JournaledQueue, lock: threading.Lock) -> int:
    """Hand parked items to their sinks (outside the queue lock), then commit them.

    ``lock`` serializes concurrent callers so no item reaches a sink twice in one session.  A
    sink that raises is logged and its item is committed anyway: a broken sink must not make a
    reader redeliver an item it already decided never to deliver.  A crash between the sink and
    the next checkpoint calls the sink again after reopen (at-least-once).  During ``close()`` a
    sink raising ``QueueClosed`` (e.g. it is this very queue) leaves its item uncommitted instead,
    so the sink gets it after reopen.
    """
    with lock:
        with queue._lock:
            batch = [(r, item, sink) for r in queue._reader_list for item, sink in r._disposing.values()]
        kept = set()
        for k, (reader, item, sink) in enumerate(batch):
            try:
                if callable(sink):
                    sink(item)
                else:
                    sink.put(item.data)
            except QueueClosed:
                if not queue._closed:
                    log.exception("reader %s: sink %r failed for item %d; item dropped", reader.name, sink, item.id)
                    continue
                # close() is running and the sink is this very queue (or another closed one):
                # leave the item uncommitted, so it reaches the sink again after reopen
                log.warning("reader %s: sink %r closed; item %d kept for after reopen", reader.name, sink, item.id)
                kept.add(k)
            except Exception:
                log.exception("reader %s: sink %r failed for item %d; item dropped", reader.name, sink, item.id)
        with queue._lock:
            for k, (reader, item, _sink) in enumerate(batch):
                if k not in kept and reader._disposing.pop(item.id, None) is not None:
                    reader._settle_locked(item)
    return len(batch)


def uses_time_policies(reader: Reader) -> bool:
    """Does this reader need the background tick (timeouts, or items that can expire)?"""
    cfg = reader.config
    return cfg.open_read_timeout is not None or cfg.max_age is not None or reader._saw_expiry


def tick(queue: JournaledQueue, lock: threading.Lock) -> None:
    """One round of time-driven policies for every reader (the background thread calls it)."""
    now, now_mono = time.time(), time.monotonic()
    with queue._lock:
        for reader in queue._reader_list:
            if reader.config.open_read_timeout is not None or reader._opened_at:
                sweep_open_reads_locked(reader, now_mono)
            if reader.config.max_age is not None or reader._saw_expiry:
                sweep_expired_locked(reader, now)
        pending = any(r._disposing for r in queue._reader_list)
    if pending:
        run_disposals(queue, lock)


# --------------------------------------------------------------------------- reopen
def estimate_backlog_bytes(journal: Journal, head: int, file_ms: int, file_offset: int) -> int:
    """Payload bytes of ids ``head..next_id-1``, estimated from journal file sizes without
    reading them: bytes from the head's position to the end, minus the per-record overhead.
    Never an under-estimate (ids committed out of order are counted, and the head's position is
    a checkpoint hint at or before it)."""
    n = journal.next_id - head
    if n <= 0:
        return 0
    span = journal.bytes_from(head, file_ms, file_offset)
    return max(0, span - n * PUT_OVERHEAD)
