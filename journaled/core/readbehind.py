"""What a reader core needs of the journal, and how it reads its backlog back from it.

A reader keeps at most ``max_memory`` of its waiting items in memory; the rest stay on disk
only and are read back, in id order, a window at a time as memory drains (read-behind).  This
module holds the journal's side of that: the :class:`LogSource` protocol, how large one window
may be, reading one, reading items back by id (those spilled behind a busy key), the backlog's
size estimated from file sizes, helpers over the items held in memory (their payload bytes,
taking the expired ones out, merging in items that fell due in id order, dropping those
retention archived), and the message of a reader that cannot read on.
It never sees a core: :class:`~journaled.core.readercore.ReaderCore` decides which of the items
read it keeps.
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter
from typing import Protocol

from journaled.format.record import PUT_OVERHEAD, Put
from journaled.item import Item, is_expired, items_from_puts
from journaled.log.journal import Cursor

log = logging.getLogger("journaled")

#: Most bytes (payload + ITEM_OVERHEAD each) one read-behind window brings into memory, so one
#: ``get`` decodes at most REFILL_BYTES // ITEM_OVERHEAD records under the queue lock.
REFILL_BYTES = 1024 * 1024
#: What ``max_memory`` charges per item in memory besides its payload: the Item, its id and time
#: objects, the bytes header and the deque slot (~145-175 bytes on CPython 3.11, rounded up).
ITEM_OVERHEAD = 200
#: ``read_ids`` reads through a gap of at most this many ids between two it wants; a wider gap
#: is crossed by ``locate`` (sparse index, then a scan of at most INDEX_EVERY records).
READ_THROUGH = 64

_item_id = attrgetter("id")


class LogSource(Protocol):
    """What a reader core needs from the journal (``journaled.log.journal.Journal`` is one)."""

    @property
    def next_id(self) -> int: ...
    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor: ...
    def read(self, cursor: Cursor, max_bytes: int, max_items: int) -> tuple[list[Put], Cursor]: ...
    def hint(self, item_id: int) -> tuple[int, int]: ...
    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int: ...
    def file_created_s(self, item_id: int) -> float: ...
    def first_id(self) -> int: ...
    def locate_time(self, ms: int) -> int: ...
    @property
    def compressed(self) -> bool: ...


def read_window(
    journal: LogSource,
    load_id: int,
    cursor: Cursor | None,
    room: int,
    avg_payload: int,
    errors: dict[int, int],
) -> tuple[list[Item], int, bool, Cursor]:
    """Decode the items from ``load_id`` on that fit in ``room`` bytes of ``max_memory`` (at
    most REFILL_BYTES; one item at least).  ``cursor`` is where the last window ended, or a
    position hint (verified); ``avg_payload`` the payload size seen so far; ``errors`` gives
    each item its error count.  Returns the items, their payload bytes, whether any has an
    ``expire_at``, and the cursor to read the next window from."""
    if cursor is None or cursor.next_id != load_id:
        cursor = journal.locate(load_id, hint=cursor)
    # `cap` records with at most `want - cap * ITEM_OVERHEAD` of payload always fit, so nothing
    # decoded is dropped (perf); the cap comes from the sizes seen so far, and a wrong guess
    # only makes one window small.
    want = min(max(1, room), REFILL_BYTES)
    cap = max(1, want // (avg_payload + ITEM_OVERHEAD))
    recs, cursor = journal.read(cursor, max_bytes=max(1, want - cap * ITEM_OVERHEAD), max_items=cap)
    # Only a single record larger than a read chunk passes that: keep one item at least, and
    # read the rest again next time, from a position hint that locate() verifies.
    items, total, expiring = items_from_puts(recs, errors, want, ITEM_OVERHEAD)
    n = len(items)
    if n < len(recs):
        cursor = Cursor(cursor.ms, recs[n].offset, -1)
    return items, total - n * ITEM_OVERHEAD, expiring, cursor


def read_ids(journal: LogSource, ids: list[int], errors: dict[int, int]) -> list[Item]:
    """The items of ``ids`` (ascending, each below ``journal.next_id``) read back from the
    journal in id order, each with its error count from ``errors``; an id whose record is gone
    (damage, archived) is left out.  Ids at most READ_THROUGH apart are read in one pass."""
    out: list[Item] = []
    want = set(ids)
    cursor: Cursor | None = None
    k, n = 0, len(ids)
    while k < n:
        target = ids[k]
        if cursor is None or cursor.next_id > target or target - cursor.next_id > READ_THROUGH:
            cursor = journal.locate(target)
        end = k
        while end + 1 < n and ids[end + 1] - ids[end] <= READ_THROUGH:
            end += 1
        span = max(1, ids[end] - cursor.next_id + 1)
        recs, cursor = journal.read(cursor, max_bytes=REFILL_BYTES, max_items=span)
        if not recs:
            break  # the journal ends before them
        items, _total, _expiring = items_from_puts([r for r in recs if r.id in want], errors, 1 << 62, 0)
        out += items
        while k < n and ids[k] < cursor.next_id:
            k += 1
    return out


def keep_window(
    items: list[Item], payload: int, expected: int, skip: Callable[[int], bool] | None
) -> tuple[list[Item], int, list[tuple[int, int]], int]:
    """What a reader keeps of a window read from id ``expected`` on (``payload`` bytes): the
    items ``skip`` does not name (``None``: it keeps them all), their payload bytes, the ranges of
    ids missing from the window (damaged or archived: lost), and the id after the window."""
    n = len(items)
    if skip is None and n and items[0].id == expected and items[-1].id == expected + n - 1:
        return items, payload, [], expected + n  # perf: consecutive ids, none to skip
    kept: list[Item] = []
    kept_bytes = 0
    gaps = []
    for item in items:
        if item.id > expected:
            gaps.append((expected, item.id - 1))
        expected = item.id + 1
        if skip is None or not skip(item.id):
            kept.append(item)
            kept_bytes += len(item.data)
    return kept, kept_bytes, gaps, expected


def take_expired(mem: deque[Item], max_age: float | None, now: float) -> list[Item]:
    """Remove the items of ``mem`` expired at ``now`` (in one pass, the rest kept in order) and
    return them."""
    dead = [it for it in mem if is_expired(it, max_age, now)]
    if dead:
        gone = {it.id for it in dead}
        kept = [it for it in mem if it.id not in gone]
        mem.clear()
        mem.extend(kept)
    return dead


def take_in(
    mem: deque[Item], items: list[Item], nbytes: int, budget: int, hold: Callable[[Item], bool] | None
) -> tuple[int, int | None]:
    """New ``items`` (``nbytes`` of payload) into ``mem`` while they fit ``budget`` bytes
    (``ITEM_OVERHEAD`` each; one at least when ``mem`` is empty).  ``hold`` takes an item with
    metadata first and returns True if it parked it (not due yet; ``None``: no item has
    metadata).  Returns the payload bytes added and the id of the first item left on disk, where
    read-behind starts (``None``: all fitted).  No item from there on is held, so every item in
    hand has an id below it and a window read back never meets one of them again."""
    if hold is None and nbytes + len(items) * ITEM_OVERHEAD <= budget:
        mem.extend(items)
        return nbytes, None
    added = 0
    for it in items:
        if hold is not None and hold(it):
            continue
        cost = len(it.data) + ITEM_OVERHEAD
        if cost > budget and mem:
            return added, it.id
        mem.append(it)
        added += len(it.data)
        budget -= cost
    return added, None


def merge_due(mem: deque[Item], items: list[Item], load_id: int | None, returned: set[int]) -> int:
    """Put ``items``, which fell due, among the waiting items ``mem`` in id order (F-41: "in id
    order among the due"), not simply at its head: items falling due one at a time must not
    come out in reverse, nor ahead of earlier ids still waiting.  ``mem`` is a run in id order
    after the reads given back to its head (abort, release: a stack, delivered first; their ids
    are in ``returned``, the core's ``given_back``), which keep their place.  An item at or past
    ``load_id`` is left out (read-behind meets its record in its place; a core never holds one).
    Returns the payload bytes added."""
    added = 0
    start = _returned_count(mem, returned)
    for item in sorted(items, key=_item_id, reverse=True):  # descending: most go to the head
        i = item.id
        if load_id is not None and i >= load_id:
            continue
        if not mem or i > mem[-1].id:
            mem.append(item)
        else:
            mem.insert(bisect.bisect_left(mem, i, lo=start, key=_item_id), item)
        added += len(item.data)
    return added


def _returned_count(mem: deque[Item], returned: set[int]) -> int:
    """How many items at the head of ``mem`` were given back (their ids in ``returned``)."""
    n = 0
    for it in mem:
        if it.id not in returned:
            break
        n += 1
    return n


def given_back(mem: deque[Item], returned: set[int], item_id: int) -> set[int]:
    """``returned`` with ``item_id``, given back to the head of ``mem`` now.  An id stays in it
    after its item was taken again (the fast path takes without asking), so once the set has
    grown past what the head could hold it is cut back to the ids still at the head."""
    if len(returned) > 2 * len(mem) + 64:
        returned = {it.id for _, it in zip(range(_returned_count(mem, returned)), mem)}
    returned.add(item_id)
    return returned


def drop_below(mem: deque[Item], first: int) -> int:
    """Remove the items of ``mem`` with an id below ``first`` (the rest kept in order); returns
    their payload bytes."""
    if not mem or min(it.id for it in mem) >= first:
        return 0
    kept = [it for it in mem if it.id >= first]
    gone = payload_of(mem) - payload_of(kept)
    mem.clear()
    mem.extend(kept)
    return gone


def payload_of(*groups: Iterable[Item]) -> int:
    """Payload bytes of the items of every group."""
    return sum(len(it.data) for group in groups for it in group)


def estimate_backlog_bytes(journal: LogSource, head: int, file_ms: int, file_offset: int) -> int:
    """Payload bytes of ids ``head..next_id-1``, estimated from journal file sizes without
    reading them: bytes from the head's position to the end, minus the per-record overhead.
    Never an under-estimate of plain records (ids committed out of order are counted, and the
    head's position is a checkpoint hint at or before it); compressed units hold more than their
    size (:func:`payload_from` reads the real figure)."""
    n = journal.next_id - head
    if n <= 0:
        return 0
    return max(0, journal.bytes_from(head, file_ms, file_offset) - n * PUT_OVERHEAD)


def payload_from(journal: LogSource, head: int, done: set[int]) -> int:
    """Payload bytes of ids ``head..next_id-1`` but ``done``, read from the journal: exact (an id
    whose record is gone counts nothing), for a journal whose sizes on disk are no bound of its
    payload (compressed units: :func:`estimate_backlog_bytes` would under-estimate).  Reads the
    uncommitted part of the journal once."""
    end = journal.next_id
    total = 0
    if head < end:
        cursor = journal.locate(head)
        while cursor.next_id < end:
            recs, cursor = journal.read(cursor, max_bytes=REFILL_BYTES, max_items=REFILL_BYTES)
            if not recs:
                break
            total += sum(len(r.payload) for r in recs if r.id < end and r.id not in done)
    return total


def stopped_at(reader: str, exc: Exception) -> str:
    """Why ``reader`` cannot read on (``exc``: a record of a newer format, docs/format.md
    [F-11]), logged once: the reader's ``stopped``."""
    log.error("reader %s: cannot read on: %s", reader, exc)
    return str(exc)
