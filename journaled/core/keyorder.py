"""Per-key order for a reader's competing consumers (``ReaderConfig(key_order=True)``).

The rule (docs/design.md, "Key order"): an item that carries a key may be delivered only when no
other item of its key is open, and no item of its key with a smaller id is still to be delivered
(waiting, given back, waiting out a delay, or not due yet).  Items without a key, and items of
other keys, are never held back by a busy key.

:class:`KeyOrder` is the bookkeeping a :class:`~journaled.core.readercore.ReaderCore` keeps for
that rule while it is on; the core calls it (under its lock) and it never sees the core.  Per key:

* ``open``: how many reads of the key are open;
* ``delayed``: ids of the key's items parked (an abort's delay, a ``not_before`` not yet due),
  still in the core's ``parked``;
* ``behind``: the key's items taken out of delivery because the key was busy, in id order (a
  deque: the next one of the key is at its left end).

An item meets the rule when ``take`` pops it (:meth:`KeyOrder.busy`): it goes out, or to the end
of its key's line (its right place in it, in the rare case it is not the largest), in O(1)
(O(log n) then).  When the last read of a key ends for good, or its item leaves for good
without being open (expired, discarded, dead-lettered), :meth:`KeyOrder.wake` gives back the
first item of its line, which the core puts among its waiting items in id order: so an item is
moved once into a line and once out of it, and no call scans a line.

Spilling (docs/design.md, "Key order", read-behind and memory): the items of the lines held in
memory are charged to ``max_memory`` like the waiting ones, and at most :func:`line_limit` of it
(a quarter).  An item lined up past that bound is *spilled*: only its id is kept (``spill``, per
key, in id order); the journal keeps the item.  When a spilled id is the first of its free key,
:meth:`KeyOrder.wake` makes it ``pending`` and the core reads it back
(:meth:`~journaled.core.holding.Holding._bring_back`, with the next spilled ids of its key that
fit) before it takes its next item.  So read-behind always has at least half of ``max_memory``
for the items further on disk, whatever a busy key holds back, and a spilled item costs one id in
memory.  A spilled item is as uncommitted as
any waiting one: the head and ``done`` never pass it, so a crash replays it.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter

from journaled.config import ReaderConfig
from journaled.core.readbehind import ITEM_OVERHEAD
from journaled.item import Item, MetaItem

_item_id = attrgetter("id")

#: The items held in memory behind busy keys take at most ``max_memory // LINE_SHARE`` (charged
#: as in ``max_memory``: payload plus ``ITEM_OVERHEAD`` each); beyond it they are spilled.
LINE_SHARE = 4
#: Most spilled ids of a key read back ahead of need when its first spilled item is read back.
PREFETCH = 64


def line_limit(config: ReaderConfig) -> int:
    """What the items held in memory behind busy keys may be charged (a quarter of
    ``max_memory``): read-behind reads ahead while all that is charged is at most half of it,
    so the lines can never stop it."""
    return config.max_memory // LINE_SHARE


class KeyOrder:
    """A reader's per-key bookkeeping while ``key_order`` is on (the module docstring says
    what each part holds).  ``count``: the items behind busy keys, spilled ones included;
    ``spilled``: those of them on disk only (in ``spill``, or ``pending``); ``nbytes``: the
    payload bytes of those in memory; ``entered``: when (the core's monotonic clock) each item in
    memory began to wait, ``spill_since``: when the oldest spilled item of each key did;
    ``limit``: what the items in memory may be charged (:func:`line_limit`)."""

    def __init__(self, limit: int = 1 << 62) -> None:
        self.open: dict[bytes, int] = {}
        self.delayed: dict[bytes, set[int]] = {}
        self.behind: dict[bytes, deque[Item]] = {}
        self.spill: dict[bytes, deque[int]] = {}
        self.spill_since: dict[bytes, float] = {}
        self.pending: dict[bytes, int] = {}  # key -> its first item, spilled, to read back now
        self.entered: dict[int, float] = {}
        self.count = 0
        self.spilled = 0
        self.nbytes = 0
        self.limit = limit

    # ------------------------------------------------------------------ delivery
    def busy(self, item_id: int, key: bytes) -> bool:
        """Must item ``item_id`` of ``key``, popped for delivery, wait (a read of its key open, an
        earlier item of its key in its line or delayed)?  O(1) (O(d) for d delayed items of it)."""
        if key in self.open:
            return True
        line = self.behind.get(key)
        if line is not None and line[0].id < item_id:
            return True
        if self.spilled and self._spilled_before(key, item_id):
            return True
        d = self.delayed.get(key)
        return d is not None and min(d) < item_id

    def _spilled_before(self, key: bytes, item_id: int) -> bool:
        sp = self.spill.get(key)
        if sp is not None and sp[0] < item_id:
            return True
        p = self.pending.get(key)
        return p is not None and p < item_id

    def charge(self) -> int:
        """What the items in memory behind busy keys count against ``max_memory``."""
        return self.nbytes + (self.count - self.spilled) * ITEM_OVERHEAD

    def line_up(self, item: Item, key: bytes, now: float) -> None:
        """Set ``item`` aside in ``key``'s line: in memory while the lines' charge stays within
        ``limit``, else spilled (its id kept, the item dropped: the journal has it)."""
        if self.charge() + len(item.data) + ITEM_OVERHEAD > self.limit:
            self._spill_id(item.id, key, now)
            return
        line = self.behind.get(key)
        if line is None:
            self.behind[key] = deque((item,))
        elif line[-1].id < item.id:
            line.append(item)
        else:  # after a switch on, or an item given back behind a later one
            line.insert(bisect.bisect_left(line, item.id, key=_item_id), item)
        self.entered[item.id] = now
        self.count += 1
        self.nbytes += len(item.data)

    def _spill_id(self, item_id: int, key: bytes, since: float) -> None:
        sp = self.spill.get(key)
        if sp is None:
            self.spill[key] = deque((item_id,))
            self.spill_since[key] = since
        elif sp[-1] < item_id:
            sp.append(item_id)
        else:  # an item given back behind later ones of its key, or a line rebuilt
            sp.insert(bisect.bisect_left(sp, item_id), item_id)
            self.spill_since[key] = min(self.spill_since[key], since)
        self.count += 1
        self.spilled += 1

    def resize(self, limit: int, now: float) -> None:
        """The lines' bound is now ``limit`` (``max_memory`` changed live): lowered, the last
        items of the lines in memory are spilled until their charge is within it again."""
        if limit != self.limit:
            self.limit = limit
            self.shrink(now)

    def shrink(self, now: float) -> None:
        """Spill the last items of the lines in memory until their charge is within ``limit``."""
        for key in list(self.behind):
            line = self.behind[key]
            while line and self.charge() > self.limit:
                item = line.pop()
                self.entered.pop(item.id, None)
                self.count -= 1
                self.nbytes -= len(item.data)
                self._spill_id(item.id, key, now)
            if not line:
                del self.behind[key]

    def opened(self, key: bytes) -> None:
        """A read of ``key`` was handed out."""
        self.open[key] = self.open.get(key, 0) + 1

    def closed(self, key: bytes) -> None:
        """A read of ``key`` ended (committed, aborted, released, rejected, timed out)."""
        n = self.open.get(key, 0) - 1
        if n > 0:
            self.open[key] = n
        else:
            self.open.pop(key, None)

    def parked(self, item: Item, key: bytes) -> None:
        """``item`` of ``key`` waits out a delay (in the core's ``parked``): it holds its key."""
        d = self.delayed.get(key)
        if d is None:
            self.delayed[key] = {item.id}
        else:
            d.add(item.id)

    def unparked(self, item: Item, key: bytes) -> None:
        """``item`` of ``key`` left the core's ``parked`` (due; or forgotten)."""
        d = self.delayed.get(key)
        if d is not None:
            d.discard(item.id)
            if not d:
                del self.delayed[key]

    def unpark(self, items: Iterable[Item]) -> None:
        """:meth:`unparked` for each of ``items`` that has a key."""
        for item in items:
            if (key := key_of(item)) is not None:
                self.unparked(item, key)

    def wake(self, key: bytes) -> Item | None:
        """The next item of ``key``, out of its line, if the key is free for it now (no read of
        the key open, no earlier item of it delayed); the core puts it among its waiting items.
        A first item that is spilled becomes ``pending`` instead (None here): the core reads it
        back (:meth:`~journaled.core.holding.Holding._bring_back`) before it takes its next item."""
        if key in self.open or key in self.pending:
            return None
        line = self.behind.get(key)
        sp = self.spill.get(key) if self.spilled else None
        if line is None and sp is None:
            return None
        first = line[0].id if line is not None else -1
        if sp is not None and (line is None or sp[0] < first):
            first = sp[0]
        if (d := self.delayed.get(key)) is not None and min(d) < first:
            return None
        if line is not None and line[0].id == first:
            return self._out(line, key)
        assert sp is not None
        self.pending[key] = sp.popleft()
        if not sp:
            del self.spill[key]
            del self.spill_since[key]
        return None

    def read_plan(self, room: int) -> list[int]:
        """The ids to read back now, ascending: each ``pending`` one, and the next spilled ids of
        its key (at most ``PREFETCH``, about what fits within ``limit`` and ``room``: what is left
        of ``max_memory``)."""
        room = max(0, min(room, self.limit - self.charge())) // ITEM_OVERHEAD
        ahead = min(PREFETCH, room // max(1, len(self.pending)))
        ids = list(self.pending.values())
        for key in self.pending:
            sp = self.spill.get(key)
            if sp is not None and ahead:
                ids.extend(sp[i] for i in range(min(ahead, len(sp))))
        ids.sort()
        return ids

    def brought(self, items: list[Item], now: float, room: int) -> tuple[list[Item], list[tuple[int, bytes]]]:
        """``items`` were read back for :meth:`read_plan`: the pending ones leave their lines (the
        core puts them among its waiting items: returned first), the next ones of their keys go
        into their lines in memory while they fit (within ``limit``, and ``room`` bytes of
        ``max_memory``: so only the pending ones may take the reader past it).  Also returns the
        pending ids not found (gone from the journal) with their keys; no key is pending then."""
        by_id = {it.id: it for it in items}
        back: list[Item] = []
        gone: list[tuple[int, bytes]] = []
        for key, first in self.pending.items():
            self.count -= 1
            self.spilled -= 1
            item = by_id.get(first)
            if item is None:
                gone.append((first, key))
            else:
                back.append(item)
            sp = self.spill.get(key)
            while sp and (nxt := by_id.get(sp[0])) is not None and self._fits(nxt, room):
                room -= len(nxt.data) + ITEM_OVERHEAD
                sp.popleft()
                self.spilled -= 1
                self.count -= 1  # line_up counts it again, in memory
                self.line_up(nxt, key, self.spill_since.get(key, now))
            if sp is not None and not sp:
                del self.spill[key]
                del self.spill_since[key]
        self.pending.clear()
        return back, gone

    def _fits(self, item: Item, room: int) -> bool:
        cost = len(item.data) + ITEM_OVERHEAD
        return cost <= room and self.charge() + cost <= self.limit

    def _out(self, line: deque[Item], key: bytes) -> Item:
        item = line.popleft()
        if not line:
            del self.behind[key]
        self.entered.pop(item.id, None)
        self.count -= 1
        self.nbytes -= len(item.data)
        return item

    # ------------------------------------------------------------------ upkeep
    def take_oldest(self) -> Item | int | None:
        """Remove and return the item with the smallest id of all lines in memory, or the id of
        a spilled one if it is smaller (the core reads it back); for ``discard_waiting``, once
        nothing else waits; O(keys with a line).  The key stays as busy as it was."""
        mem_key = min(self.behind, key=lambda k: self.behind[k][0].id) if self.behind else None
        sp_key = min(self.spill, key=lambda k: self.spill[k][0]) if self.spill else None
        if sp_key is not None and (mem_key is None or self.spill[sp_key][0] < self.behind[mem_key][0].id):
            sp = self.spill[sp_key]
            item_id = sp.popleft()
            if not sp:
                del self.spill[sp_key]
                del self.spill_since[sp_key]
            self.count -= 1
            self.spilled -= 1
            return item_id
        if mem_key is None:
            return None
        return self._out(self.behind[mem_key], mem_key)

    def take_where(self, drop: Callable[[Item], bool]) -> list[Item]:
        """Remove the items of every line in memory that ``drop`` names (O(items in lines)) and
        return them (the core then offers their keys to :meth:`wake`); spilled items are left to
        be judged when they are read back."""
        gone: list[Item] = []
        for key in list(self.behind):
            line = self.behind[key]
            out = [it for it in line if drop(it)]
            if not out:
                continue
            kept = [it for it in line if not drop(it)]
            for it in out:
                self.entered.pop(it.id, None)
                self.count -= 1
                self.nbytes -= len(it.data)
            gone.extend(out)
            if kept:
                self.behind[key] = deque(kept)
            else:
                del self.behind[key]
        return gone

    def drain(self) -> tuple[list[Item], dict[bytes, list[int]]]:
        """Every item of every line in memory, and the spilled ids of every key (pending ones
        too), lines emptied (key order switched off, or rebuilt)."""
        out = [it for line in self.behind.values() for it in line]
        spilled = {key: list(sp) for key, sp in self.spill.items()}
        for key, first in self.pending.items():
            spilled.setdefault(key, []).insert(0, first)
        self.behind.clear()
        self.entered.clear()
        self.spill.clear()
        self.spill_since.clear()
        self.pending.clear()
        self.count = self.nbytes = self.spilled = 0
        return out, spilled

    def oldest_wait(self, now: float) -> float:
        """Seconds the longest-waiting first item of a line has waited at ``now`` (0: none); for
        a line whose first item is spilled, at most the wait of its oldest spilled one.
        O(keys with a line)."""
        times = [self.entered[line[0].id] for line in self.behind.values()]
        times += self.spill_since.values()
        return max(0.0, now - min(times)) if times else 0.0

    def payload(self) -> int:
        """Payload bytes of the items behind busy keys (``nbytes``)."""
        return self.nbytes

    def items(self) -> Iterable[Item]:
        """The items behind busy keys held in memory, line by line."""
        return (it for line in self.behind.values() for it in line)


def start(
    open_reads: Iterable[Item],
    parked: Iterable[Item],
    waiting: Iterable[Item],
    now: float,
    limit: int = 1 << 62,
    spilled: dict[bytes, list[int]] | None = None,
) -> tuple[KeyOrder, list[Item], list[Item]]:
    """The bookkeeping for a reader switching key order on (or rebuilt after retention): its open
    reads and parked items hold their keys; its waiting items with a key all go to their key's
    line (within ``limit``, the rest spilled), the ids ``spilled`` before stay spilled, and each
    key free for its first item gives it back (or makes it pending).  Returns the bookkeeping,
    the waiting items without a key (in their order) and the items given back (the core puts
    them among its waiting items in id order).  O(items in hand), once."""
    keys = KeyOrder(limit)
    for item in open_reads:
        if (key := key_of(item)) is not None:
            keys.opened(key)
    for item in parked:
        if (key := key_of(item)) is not None:
            keys.parked(item, key)
    plain: list[Item] = []
    for item in waiting:
        if (key := key_of(item)) is None:
            plain.append(item)
        else:
            keys.line_up(item, key, now)
    for key, ids in (spilled or {}).items():
        for item_id in ids:
            keys._spill_id(item_id, key, now)
    woken = [it for key in {*keys.behind, *keys.spill} if (it := keys.wake(key)) is not None]
    return keys, plain, woken


def rebuild(
    keys: KeyOrder | None,
    on: bool,
    first: int,
    waiting: Iterable[Item],
    open_reads: Iterable[Item],
    parked: Iterable[Item],
    now: float,
    limit: int = 1 << 62,
) -> tuple[KeyOrder | None, list[Item] | None, list[Item], list[int]]:
    """A reader's key order switched off (``on`` False: the items of the lines go back among the
    waiting ones) or (re)built by :func:`start` (switched on, or retention moved the head to
    ``first``: items below it are gone; spilled ids stay spilled).  Returns the new bookkeeping
    (None: off), the waiting items that stay (None: all of them, as they are), the items to put
    among them in id order, and the spilled ids to read back and put among them too (ascending)."""
    lined: list[Item] = []
    spilled: dict[bytes, list[int]] = {}
    if keys is not None:
        items, ids = keys.drain()
        lined = [it for it in items if it.id >= first]
        spilled = {key: kept for key, some in ids.items() if (kept := [i for i in some if i >= first])}
    if not on:
        return None, None, lined, sorted(i for some in spilled.values() for i in some)
    new, plain, back = start(open_reads, parked, [*waiting, *lined], now, limit, spilled)
    return new, plain, back, []


def may_hold(items: list[Item]) -> bool:
    """Might ``Holding._hold`` park one of a put's ``items``?  Not plain ones, nor ones without a not-before:
    (perf) a reader then takes them in as plain items, in one step."""
    return type(items[0]) is not Item and any(
        type(i) is not MetaItem or i.stored.not_before_ms for i in items
    )


def key_of(item: Item) -> bytes | None:
    """``item``'s key (a plain :class:`Item` has none: no property call on the common path)."""
    return None if type(item) is Item else item.key
