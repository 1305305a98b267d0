"""Per-reader policies: size limits and the full policy, expiry, open-read timeouts, dead letters.

Kept out of core/readercore.py so the core stays about delivery order.  Every function here takes a
:class:`~journaled.core.readercore.ReaderCore` and must be called with its lock (the queue lock) held;
none does I/O except what read-behind already does, and none runs user code: items bound for a
sink are parked in ``core.disposing`` and handed over later, outside the lock, by the queue's
sink thread (owner/engine.py), then committed.

Design and guarantees: docs/design.md, "Reader policies".
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from journaled.config import Sink
from journaled.deadletter import DeadLetter
from journaled.errors import Full
from journaled.format.record import PUT_OVERHEAD
from journaled.item import Item

if TYPE_CHECKING:
    from journaled.core.readercore import LogSource, ReaderCore

log = logging.getLogger("journaled")

#: The background thread runs time-driven policies (expiry sweep, open-read timeouts) at least
#: this often when some reader uses them.
POLICY_TICK = 0.1
#: Most items one sweep expires from a reader's head, so the lock is never held for long.
SWEEP_LIMIT = 4096


# --------------------------------------------------------------------------- backlog and room
def backlog_items(core: ReaderCore) -> int:
    """Uncommitted items (waiting, open or bound for a sink): exact, and derived only from
    durable state, so it is the same after a reopen."""
    return core.journal.next_id - core.head - len(core.done)


def backlog_bytes(core: ReaderCore) -> int:
    """Payload bytes of the uncommitted items.  Kept incrementally (exact within a session);
    after a reopen it starts as an estimate, made exact again as soon as every uncommitted item
    is in memory (nothing left on disk only) or none is left."""
    if backlog_items(core) == 0:
        # also corrects ids skipped as lost (journal damage), whose sizes were never known
        core.backlog_bytes, core.backlog_exact = 0, True
    elif not core.backlog_exact and core.load_id is None:
        total = core.mem_bytes + sum(len(i.data) for i in core.open.values())
        total += sum(len(i.data) for i, _s in core.disposing.values())
        total += sum(len(i.data) for i in core.parked.values())
        core.backlog_bytes, core.backlog_exact = total, True
    return core.backlog_bytes


def is_full(core: ReaderCore, n: int, nbytes: int) -> bool:
    """Would ``n`` more items of ``nbytes`` pass this reader's ``max_items``/``max_size``?
    Items already bound for a sink are not charged: they are on their way out."""
    cfg = core.config
    leaving = core.disposing
    if cfg.max_items is not None and backlog_items(core) - len(leaving) + n > cfg.max_items:
        return True
    if cfg.max_size is None:
        return False
    leaving_bytes = sum(len(i.data) for i, _s in leaving.values()) if leaving else 0
    return backlog_bytes(core) - leaving_bytes + nbytes > cfg.max_size


def make_room(cores: Sequence[ReaderCore], n: int, nbytes: int) -> None:
    """Called by the append path before anything is appended: raise :class:`Full` naming the
    first full reader that does not discard (nothing changes then), else discard old items."""
    limited = [c for c in cores if c.config.max_items is not None or c.config.max_size is not None]
    if not limited:
        return
    now = time.time()
    full = []
    for c in limited:
        if is_full(c, n, nbytes):
            # expired items make room before anything is refused (all of memory, not just the head)
            sweep_expired(c, now)
            sweep_expired_in_memory(c, now)
            if is_full(c, n, nbytes):
                full.append(c)
    for c in full:
        if not c.config.discard_old_when_full or not _can_make_room(c, n, nbytes):
            cfg = c.config
            raise Full(
                f"reader {c.name!r} is full ({backlog_items(c)} items, ~{c.backlog_bytes} "
                f"bytes; max_items={cfg.max_items}, max_size={cfg.max_size}); nothing was written"
            )
    for c in full:
        while is_full(c, n, nbytes):
            item = c.pop_waiting()
            if item is None:  # cannot happen after _can_make_room; never loop forever
                raise Full(f"reader {c.name!r} is full and has nothing left to discard")
            c.discarded += 1
            c.settle(item)


def _can_make_room(core: ReaderCore, n: int, nbytes: int) -> bool:
    """Could dropping every waiting item make room?  (Open reads and parked items are never
    discarded.)"""
    cfg = core.config
    if cfg.max_items is not None and len(core.open) + len(core.parked) + n > cfg.max_items:
        return False
    if cfg.max_size is not None:
        pinned_bytes = sum(len(i.data) for i in core.open.values())
        pinned_bytes += sum(len(i.data) for i in core.parked.values())
        if pinned_bytes + nbytes > cfg.max_size:
            return False
    return True


# --------------------------------------------------------------------------- expiry
def is_expired(item: Item, max_age: float | None, now: float) -> bool:
    if item.expire_at is not None and item.expire_at <= now:
        return True
    return max_age is not None and item.add_time + max_age <= now


def check_delivery(core: ReaderCore, item: Item) -> bool:
    """Just before ``item`` is handed out: True if it may be delivered, else it has been
    disposed of (expired or dead-lettered).  Because this runs at delivery itself, an item that
    expires after a sweep is still never delivered, and it cannot wedge the head: it is simply
    taken out and the next item is considered."""
    cfg = core.config
    if item.expire_at is not None or cfg.max_age is not None:
        if is_expired(item, cfg.max_age, time.time()):
            dispose(core, item, "expired")
            return False
    if cfg.max_errors is not None and item.error_count >= cfg.max_errors:
        dispose(core, item, "max_errors")
        return False
    return True


def sweep_expired(core: ReaderCore, now: float) -> int:
    """Remove expired items from the head of the reader (in memory, reading back from disk as
    needed), up to ``SWEEP_LIMIT``.  Items expiring out of order behind a live one are caught at
    delivery instead.  Returns how many expired."""
    cfg = core.config
    count = 0
    while count < SWEEP_LIMIT:
        item = core.peek_waiting()
        if item is None or not (item.expire_at is not None or cfg.max_age is not None):
            break
        if not is_expired(item, cfg.max_age, now):
            break
        popped = core.pop_waiting()
        assert popped is item
        dispose(core, item, "expired")
        count += 1
    return count


def sweep_expired_in_memory(core: ReaderCore, now: float) -> int:
    """Remove every expired item held in memory, wherever it is (O(items in memory): only used
    when a reader is about to refuse a put)."""
    cfg = core.config
    if cfg.max_age is None and not core.saw_expiry:
        return 0
    dead = [it for it in core.mem if is_expired(it, cfg.max_age, now)]
    if not dead:
        return 0
    gone = {it.id for it in dead}
    kept = [it for it in core.mem if it.id not in gone]
    core.mem.clear()
    core.mem.extend(kept)
    for it in dead:
        core.mem_bytes -= len(it.data)
        dispose(core, it, "expired")
    return len(dead)


# --------------------------------------------------------------------------- open reads
def note_opened(core: ReaderCore, item_id: int) -> None:
    """An open read started (only called when ``open_read_timeout`` is set)."""
    core.opened_at.pop(item_id, None)  # re-insert: dict order is delivery order
    core.opened_at[item_id] = time.monotonic()
    if len(core.opened_at) == 1:
        core.wake_engine()  # the background tick may be idle


def sweep_open_reads(core: ReaderCore, now_mono: float) -> int:
    """Abort reads open longer than ``open_read_timeout``.  ``opened_at`` is in delivery order,
    so this stops at the first read still within its time; entries of reads already committed
    or aborted are dropped on the way."""
    timeout = core.config.open_read_timeout
    opened = core.opened_at
    if timeout is None:
        opened.clear()
        return 0
    count = 0
    for item_id in list(opened):
        since = opened[item_id]
        item = core.open.get(item_id)
        if item is None:
            del opened[item_id]
            continue
        if now_mono - since < timeout:
            break
        del opened[item_id]
        log.warning("reader %s: read of item %d open for more than %ss; aborted", core.name, item_id, timeout)
        core.timed_out += 1
        core.abort(item)
        count += 1
    return count


def uses_time_policies(core: ReaderCore) -> bool:
    """Does this reader need the background tick (timeouts, or items that can expire)?  Parked
    items need no tick: the engine sleeps until the earliest is due (:func:`next_due`)."""
    cfg = core.config
    return cfg.open_read_timeout is not None or cfg.max_age is not None or core.saw_expiry


def sweep(core: ReaderCore, now: float, now_mono: float) -> None:
    """One round of time-driven policies for one reader (the background tick)."""
    if core.parked:
        core.release_due(now_mono)
    if core.config.open_read_timeout is not None or core.opened_at:
        sweep_open_reads(core, now_mono)
    if core.config.max_age is not None or core.saw_expiry:
        sweep_expired(core, now)


def next_due(cores: Sequence[ReaderCore]) -> float | None:
    """When (``time.monotonic()``) the earliest parked item of any reader is due, or None."""
    times = [c.due[0][0] for c in cores if c.parked and c.due]
    return min(times) if times else None


def tick(cores: Sequence[ReaderCore]) -> bool:
    """One round of time-driven policies over every reader (the background thread's tick, and
    ``q.run_policies()``); True if items now wait for a sink."""
    now, now_mono = time.time(), time.monotonic()
    for core in cores:
        sweep(core, now, now_mono)
    return any(c.disposing for c in cores)


# --------------------------------------------------------------------------- sinks
def dispose(core: ReaderCore, item: Item, kind: str, reason: str = "") -> None:
    """Take ``item`` out of delivery for good: ``kind`` is ``"expired"``, ``"max_errors"`` or
    ``"rejected"`` (:data:`journaled.deadletter.KINDS`); its sink gets a :class:`DeadLetter`."""
    cfg = core.config
    if kind == "expired":
        core.expired += 1
        sink: Sink | None = cfg.expire_to
        reason = reason or "expired"
    elif kind == "rejected":
        core.rejected += 1
        sink = cfg.dead_letter
    else:
        core.dead_lettered += 1
        sink = cfg.dead_letter
        reason = f"aborted {item.error_count} times (max_errors={cfg.max_errors})"
        log.warning(
            "reader %s: item %d %s; %s",
            core.name,
            item.id,
            reason,
            "moved to dead_letter" if sink is not None else "dropped",
        )
    if sink is None:
        core.settle(item)
        return
    core.disposing[item.id] = (DeadLetter.of(item, kind, reason, core.name), sink)
    core.wake_engine()


# --------------------------------------------------------------------------- reopen
def estimate_backlog_bytes(journal: LogSource, head: int, file_ms: int, file_offset: int) -> int:
    """Payload bytes of ids ``head..next_id-1``, estimated from journal file sizes without
    reading them: bytes from the head's position to the end, minus the per-record overhead.
    Never an under-estimate (ids committed out of order are counted, and the head's position is
    a checkpoint hint at or before it)."""
    n = journal.next_id - head
    if n <= 0:
        return 0
    span = journal.bytes_from(head, file_ms, file_offset)
    return max(0, span - n * PUT_OVERHEAD)
