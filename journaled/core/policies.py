"""The policies over all the readers of a queue: room for a put, and the background tick.

Decisions only: which reader is full, whether a put is refused or makes room, which
time-driven upkeep a reader needs now.  What changes a reader is done by its core
(:class:`~journaled.core.readercore.ReaderCore`: ``discard_waiting``, ``expire_head``,
``expire_in_memory``, ``time_out_reads``, ``release_due``), and the rules a single delivery
follows (expiry, ``max_errors``) are applied by the core's ``take`` itself.  Every function must be
called with the queue lock held; none does I/O except what read-behind already does, and none
runs user code (items bound for a sink are handed over later, outside the lock, by the engine).
Wall-clock and monotonic "now" are read from each core's ``clock`` (passed in when it was made).

Design and guarantees: docs/design.md, "Reader policies".
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from journaled.errors import Full

if TYPE_CHECKING:
    from journaled.core.readercore import ReaderCore

#: The background thread runs time-driven policies (expiry sweep, open-read timeouts) at least
#: this often when some reader uses them.
POLICY_TICK = 0.1


# --------------------------------------------------------------------------- room for a put
def is_full(core: ReaderCore, n: int, nbytes: int) -> bool:
    """Would ``n`` more items of ``nbytes`` pass this reader's ``max_items``/``max_size``?
    Items already bound for a sink are not charged: they are on their way out."""
    cfg = core.config
    leaving = core.disposing
    if cfg.max_items is not None and core.backlog_items() - len(leaving) + n > cfg.max_items:
        return True
    if cfg.max_size is None:
        return False
    leaving_bytes = sum(len(i.data) for i, _s in leaving.values()) if leaving else 0
    return core.backlog_payload() - leaving_bytes + nbytes > cfg.max_size


def make_room(cores: Sequence[ReaderCore], n: int, nbytes: int) -> None:
    """Called by the append path before anything is appended: raise :class:`Full` naming the
    first full reader that does not discard (nothing changes then), else discard old items."""
    limited = [c for c in cores if c.config.max_items is not None or c.config.max_size is not None]
    if not limited:
        return
    full = []
    for c in limited:
        if is_full(c, n, nbytes):
            # expired items make room before anything is refused (all of memory, not just the head)
            now = c.clock.time()
            c.expire_head(now)
            c.expire_in_memory(now)
            if is_full(c, n, nbytes):
                full.append(c)
    for c in full:
        if not c.config.discard_old_when_full or not _can_make_room(c, n, nbytes):
            cfg = c.config
            raise Full(
                f"reader {c.name!r} is full ({c.backlog_items()} items, ~{c.backlog_bytes} "
                f"bytes; max_items={cfg.max_items}, max_size={cfg.max_size}); nothing was written"
            )
    for c in full:
        while is_full(c, n, nbytes):
            if not c.discard_waiting(1):  # cannot happen after _can_make_room; never loop forever
                raise Full(f"reader {c.name!r} is full and has nothing left to discard")


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


# --------------------------------------------------------------------------- the tick
def uses_time_policies(core: ReaderCore) -> bool:
    """Does this reader need the background tick (timeouts, or items that can expire)?  Parked
    items need no tick: the engine sleeps until the earliest is due (:func:`next_due`)."""
    cfg = core.config
    return (
        cfg.open_read_timeout is not None
        or cfg.max_age is not None
        or core.saw_expiry
        or retired_waiting(core)
    )


def retired_waiting(core: ReaderCore) -> bool:
    """Are items that reached ``max_errors`` waiting for their sink?  After a reopen: a closed
    destination refused them before it, and their error counts (from the checkpoint) say so."""
    most = core.config.max_errors
    if most is None or not core.errors:
        return False
    return any(c >= most for i, c in core.errors.items() if i not in core.disposing)


def sweep(core: ReaderCore, now: float, now_mono: float) -> None:
    """One round of time-driven policies for one reader (the background tick)."""
    if core.parked:
        core.release_due(now_mono)
    if core.config.open_read_timeout is not None or core.opened_at:
        core.time_out_reads(now_mono)
    if core.config.max_age is not None or core.saw_expiry or retired_waiting(core):
        core.expire_head(now)


def next_due(cores: Sequence[ReaderCore]) -> float | None:
    """When (on the cores' monotonic clock) the earliest parked item of any reader is due, or None."""
    times = [t for c in cores if c.parked and (t := c.parked.next_due()) is not None]
    return min(times) if times else None


def tick(cores: Sequence[ReaderCore]) -> bool:
    """One round of time-driven policies over every reader (the background thread's tick, and
    ``q.run_policies()``); True if items now wait for a sink."""
    for core in cores:
        clock = core.clock
        sweep(core, clock.time(), clock.monotonic())
    return any(c.disposing for c in cores)
