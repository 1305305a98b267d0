"""Reads that did not succeed: abort (with a delay and the retry backoff), release, reject, and
the parked items waiting out their delay.

Kept out of core/readercore.py so the core stays about delivery order; :class:`ReaderCore`'s
``abort``/``release``/``requeue``/``reject`` are these functions.  Every function takes a
:class:`~journaled.core.readercore.ReaderCore` and must be called with its lock (the queue lock) held.

Parked items (``core.parked``, ordered by ``core.due``) are aborted items that may not be
delivered again before their time (``time.monotonic()``).  They are out of the delivery order,
so they never hold back the items behind them; their ids stay uncommitted like any open or
aborted id, so the head (and the checkpoint) does not pass them.  The delay lives in memory
only: after a crash or reopen a parked item is delivered again at once, with its error count.
Due items go back to the head when the next ``take`` looks, or when the maintenance thread's
tick, which sleeps until the earliest due time, releases them to blocked ``get`` calls.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import TYPE_CHECKING

from journaled.config import ReaderConfig
from journaled.core import policies
from journaled.item import Item, new_item

if TYPE_CHECKING:
    from journaled.core.readercore import ReaderCore


def redelivery(item: Item, error_count: int) -> Item:
    """A fresh object for an item going back to the head (a new delivery handle)."""
    return new_item(item.id, item.data, item.add_time, item.expire_at, error_count)


def check_delay(delay: object) -> float | None:
    """``delay`` as seconds (``None``: the reader's backoff); else ``TypeError``/``ValueError``."""
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"delay must be a number of seconds or None, got {delay!r}")
    if not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    return float(delay)


def backoff(config: ReaderConfig, error_count: int) -> float:
    """The delay before an item that failed ``error_count`` times is delivered again:
    ``retry_delay * 2 ** (error_count - 1)``, at most ``retry_delay_max`` (0 without a
    ``retry_delay``)."""
    first = config.retry_delay
    if first is None or error_count < 1:
        return 0.0
    delay = first * 2.0 ** min(error_count - 1, 64)
    cap = config.retry_delay_max
    return delay if cap is None else min(delay, cap)


def abort(core: ReaderCore, item: Item | int, delay: float | None = None) -> None:
    """Close the open read ``item`` names as failed: ``error_count + 1``, then to the dead
    letters once ``max_errors`` is reached, else back to the head after ``delay`` seconds
    (``None``: the reader's backoff)."""
    item = core.open_read(item)
    del core.open[item.id]
    core.aborted += 1
    failed = redelivery(item, item.error_count + 1)
    cfg = core.config
    if cfg.max_errors is not None and failed.error_count >= cfg.max_errors:
        core.errors[item.id] = failed.error_count  # until the sink has it: survives a crash
        core.dirty = True
        policies.dispose(core, failed, "max_errors")
        return
    wait = backoff(cfg, failed.error_count) if delay is None else delay
    if wait > 0:
        park(core, failed, wait)
    else:
        requeue(core, failed)


def reject(core: ReaderCore, item: Item | int, reason: str) -> None:
    """Close the open read ``item`` names for good, without a retry: to ``dead_letter``
    (dropped when there is none), its error count unchanged."""
    item = core.open_read(item)
    del core.open[item.id]
    policies.dispose(core, item, "rejected", reason)


def release(core: ReaderCore, item: Item | int) -> None:
    """Give the open read ``item`` names back to the head without counting an error."""
    item = core.open_read(item)
    del core.open[item.id]
    requeue(core, redelivery(item, item.error_count))


def requeue(core: ReaderCore, item: Item) -> None:
    """Put ``item`` back at the head (it is the next one delivered) and serve waiters."""
    core.errors[item.id] = item.error_count
    core.mem.appendleft(item)
    core.mem_bytes += len(item.data)
    core.dirty = True
    if core.waiters:
        core.hand_off()


def park(core: ReaderCore, item: Item, delay: float) -> None:
    """Keep ``item`` out of delivery for ``delay`` seconds (see the module docstring)."""
    core.errors[item.id] = item.error_count
    core.dirty = True
    core.parked[item.id] = item
    due = time.monotonic() + delay
    first = core.due[0][0] if core.due else math.inf
    heapq.heappush(core.due, (due, item.id))
    if due < first:
        core.wake_engine()  # its tick sleeps until the earliest due time


def release_due(core: ReaderCore, now: float | None = None, serve: bool = True) -> int:
    """Parked items whose time has come go back to the head, the earliest first, and are
    offered to waiters unless ``serve`` is False (the caller is taking one); returns how many."""
    if now is None:
        now = time.monotonic()
    due = core.due
    back = []
    while due and due[0][0] <= now:
        _at, item_id = heapq.heappop(due)
        item = core.parked.pop(item_id, None)
        if item is not None:
            back.append(item)
    for item in reversed(back):
        core.mem.appendleft(item)
        core.mem_bytes += len(item.data)
    if back and serve and core.waiters:
        core.hand_off()
    return len(back)
