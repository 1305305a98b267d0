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
moved once into a line and once out of it, and no call scans a line.  The items behind a key
are in memory, charged to ``max_memory`` like the waiting ones (:attr:`KeyOrder.nbytes`,
:attr:`KeyOrder.count`), so a busy key's backlog can never take more than the reader's memory:
read-behind stops reading ahead while they fill it, and goes on as they drain.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Callable, Iterable
from operator import attrgetter

from journaled.config import ReaderConfig
from journaled.core import retry
from journaled.core.readbehind import merge_due, payload_of
from journaled.core.waiters import Waiter
from journaled.item import Item, is_expired

_item_id = attrgetter("id")


class KeyOrder:
    """A reader's per-key bookkeeping while ``key_order`` is on (the module docstring says
    what each part holds).  ``count`` / ``nbytes``: the items behind busy keys and their
    payload bytes; ``entered``: when (the core's monotonic clock) each of them began to wait."""

    def __init__(self) -> None:
        self.open: dict[bytes, int] = {}
        self.delayed: dict[bytes, set[int]] = {}
        self.behind: dict[bytes, deque[Item]] = {}
        self.entered: dict[int, float] = {}
        self.count = 0
        self.nbytes = 0

    # ------------------------------------------------------------------ delivery
    def busy(self, item_id: int, key: bytes) -> bool:
        """Must item ``item_id`` of ``key``, popped for delivery, wait (a read of its key open, an
        earlier item of its key in its line or delayed)?  O(1) (O(d) for d delayed items of it)."""
        if key in self.open:
            return True
        line = self.behind.get(key)
        if line is not None and line[0].id < item_id:
            return True
        d = self.delayed.get(key)
        return d is not None and min(d) < item_id

    def line_up(self, item: Item, key: bytes, now: float) -> None:
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
        the key open, no earlier item of it delayed); the core puts it among its waiting items."""
        line = self.behind.get(key)
        if line is None or key in self.open:
            return None
        first = line[0]
        if (d := self.delayed.get(key)) is not None and min(d) < first.id:
            return None
        return self._out(line, key)

    def _out(self, line: deque[Item], key: bytes) -> Item:
        item = line.popleft()
        if not line:
            del self.behind[key]
        self.entered.pop(item.id, None)
        self.count -= 1
        self.nbytes -= len(item.data)
        return item

    # ------------------------------------------------------------------ upkeep
    def take_oldest(self) -> Item | None:
        """Remove and return the item with the smallest id of all lines (for ``discard_waiting``,
        once nothing else waits; O(keys with a line)).  The key stays as busy as it was."""
        if not self.behind:
            return None
        key = min(self.behind, key=lambda k: self.behind[k][0].id)
        return self._out(self.behind[key], key)

    def take_where(self, drop: Callable[[Item], bool]) -> list[Item]:
        """Remove the items of every line that ``drop`` names (O(items in lines)) and return
        them (the core then offers their keys to :meth:`wake`)."""
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

    def drain(self) -> list[Item]:
        """Every item of every line, lines emptied (key order switched off)."""
        out = [it for line in self.behind.values() for it in line]
        self.behind.clear()
        self.entered.clear()
        self.count = self.nbytes = 0
        return out

    def oldest_wait(self, now: float) -> float:
        """Seconds the longest-waiting first item of a line has waited at ``now`` (0: none);
        O(keys with a line)."""
        if not self.entered:
            return 0.0
        return max(0.0, now - min(self.entered[line[0].id] for line in self.behind.values()))

    def payload(self) -> int:
        """Payload bytes of the items behind busy keys (``nbytes``)."""
        return self.nbytes

    def items(self) -> Iterable[Item]:
        """The items behind busy keys, line by line."""
        return (it for line in self.behind.values() for it in line)


class Holding:
    """The part of :class:`~journaled.core.readercore.ReaderCore` that holds items out of the
    delivery order: not due yet (``not_before``) or waiting out an abort's delay (``parked``), and
    behind a busy key (``keys``, under ``key_order``).  A base class, so the core's module stays
    within its size; it declares the core's attributes it uses, and the two core methods it calls
    (:meth:`_dispose`, :meth:`_hand_off`) are the core's.  Guarded by ``core.lock`` like the rest."""

    clock: retry.Clock
    config: ReaderConfig
    keys: KeyOrder | None
    parked: retry.Parked
    mem: deque[Item]
    mem_bytes: int
    load_id: int | None
    given_back: set[int]
    open: dict[int, Item]
    waiters: deque[Waiter]
    wake_engine: Callable[[], None]

    def _dispose(self, item: Item, kind: str, reason: str = "") -> None:
        raise NotImplementedError  # the core's

    def _hand_off(self) -> None:
        raise NotImplementedError  # the core's

    def _hold(self, item: Item, in_order: bool = False) -> bool:
        """Park ``item`` until its ``not_before``, or expire it if it expires by then; True if so.
        An item with a key arriving under key order is held only at its turn (``in_order``)."""
        if not in_order and self.keys is not None and item.key is not None:
            return False
        clock = self.clock
        due = retry.not_due(item, clock.time(), clock.monotonic())
        if due is None:
            return False
        if is_expired(item, self.config.max_age, item.not_before or 0.0):
            self._dispose(item, "expired")
        else:
            self._park(item, due)
        return True

    def _park(self, item: Item, due: float) -> None:
        if self.keys is not None and (key := key_of(item)) is not None:
            self.keys.parked(item, key)  # it holds its key while it waits
        if self.parked.park(item, due):
            self.wake_engine()  # its tick sleeps until the earliest due time

    def _end_read(self, item: Item, free: bool = False) -> None:
        """The read of ``item`` ended (no longer open); ``free``: for good (committed), so its key's
        next item goes among the waiting ones (else :meth:`_key_free` does that, or it stays held)."""
        del self.open[item.id]
        keys = self.keys
        if keys is not None and (key := key_of(item)) is not None:
            keys.closed(key)
            if free and (nxt := keys.wake(key)) is not None:
                self.mem_bytes += merge_due(self.mem, [nxt], self.load_id, self.given_back)

    def _key_free(self, item: Item) -> None:
        """``item`` left for good (key order): the next item of its key goes among the waiting."""
        keys = self.keys
        if keys is not None and (key := key_of(item)) is not None and (nxt := keys.wake(key)) is not None:
            self.mem_bytes += merge_due(self.mem, [nxt], self.load_id, self.given_back)

    def release_due(self, now: float | None = None) -> int:
        """Parked items due by ``now`` (the clock's ``monotonic()`` when None) go back to
        the head, the earliest first, and are offered to waiters; returns how many."""
        back = self._unpark(self.clock.monotonic() if now is None else now)
        if back and self.waiters:
            self._hand_off()
        return back

    def _unpark(self, now: float) -> int:
        back = self.parked.unpark_due(now)
        if back and self.keys is not None:
            self.keys.unpark(back)
        if back:  # among the waiting items in id order (F-41), not all at the head
            self.mem_bytes += merge_due(self.mem, back, self.load_id, self.given_back)
        return len(back)

    def _rekey(self, on: bool, first: int = 0) -> None:
        """Key order switched off or (re)built (switched on; retention moved the head to ``first``)."""
        held = (self.open.values(), self.parked.values(), self.clock.monotonic())
        self.keys, plain, back = rebuild(self.keys, on, first, self.mem, *held)
        if plain is not None:  # the keyed items left the waiting ones: none is a returned read now
            self.given_back &= {it.id for it in plain}
            self.mem, self.mem_bytes = deque(plain), payload_of(plain)
        self.mem_bytes += merge_due(self.mem, back, self.load_id, self.given_back)

    def _admit(self, item: Item, key: bytes) -> bool:
        """May ``item`` (of ``key``, under key order) go out now?  Else it is in its key's line."""
        keys = self.keys
        if keys is not None and keys.busy(item.id, key):
            keys.line_up(item, key, self.clock.monotonic())
            self.given_back.discard(item.id)  # it comes back in id order, not as a returned read
            return False
        return True

    def _serve_keys(self) -> None:
        """Under key order, give blocked gets what a key set free (after a read ended)."""
        if self.keys is not None and self.waiters:
            self._hand_off()

    def _switch_keys(self, on: bool) -> None:
        """``key_order`` changed live: the lines are built (or given back), then waiters served."""
        if on != (self.keys is not None):
            self._rekey(on)
            if self.waiters:
                self._hand_off()

    def _expire_lined(self, max_age: float | None, now: float) -> list[Item]:
        """Items behind busy keys expired at ``now``, out of their lines (the core disposes of them)."""
        return [] if self.keys is None else self.keys.take_where(lambda i: is_expired(i, max_age, now))

    def _lined_oldest(self) -> Item | None:
        """The item with the smallest id behind a busy key, out of its line (None: none)."""
        return None if self.keys is None else self.keys.take_oldest()


def start(
    open_reads: Iterable[Item], parked: Iterable[Item], waiting: Iterable[Item], now: float
) -> tuple[KeyOrder, list[Item], list[Item]]:
    """The bookkeeping for a reader switching key order on (or rebuilt after retention): its open
    reads and parked items hold their keys; its waiting items with a key all go to their key's
    line, and each key free for its first item gives it back.  Returns the bookkeeping, the
    waiting items without a key (in their order) and the items given back (the core puts them
    among its waiting items in id order).  O(items in hand), once."""
    keys = KeyOrder()
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
    woken = [it for key in list(keys.behind) if (it := keys.wake(key)) is not None]
    return keys, plain, woken


def rebuild(
    keys: KeyOrder | None,
    on: bool,
    first: int,
    waiting: Iterable[Item],
    open_reads: Iterable[Item],
    parked: Iterable[Item],
    now: float,
) -> tuple[KeyOrder | None, list[Item] | None, list[Item]]:
    """A reader's key order switched off (``on`` False: the items of the lines go back among the
    waiting ones) or (re)built by :func:`start` (switched on, or retention moved the head to
    ``first``: items below it are gone).  Returns the new bookkeeping (None: off), the waiting
    items that stay (None: all of them, as they are) and the items to put among them in id order."""
    lined = [] if keys is None else [it for it in keys.drain() if it.id >= first]
    if not on:
        return None, None, lined
    new, plain, back = start(open_reads, parked, [*waiting, *lined], now)
    return new, plain, back


def key_of(item: Item) -> bytes | None:
    """``item``'s key (a plain :class:`Item` has none: no property call on the common path)."""
    return None if type(item) is Item else item.key
