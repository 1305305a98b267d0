"""What a reader core holds out of the delivery order: items not due yet (``not_before``),
items waiting out an abort's delay (``parked``), and, under ``key_order``, items behind a busy
key (the lines of :class:`~journaled.core.keyorder.KeyOrder`, spilled past their share of
``max_memory`` and read back here).

:class:`Holding` is a base class of :class:`~journaled.core.readercore.ReaderCore`, kept in its
own module so each stays a size a reader takes in at once; it works on the core's state under the
core's lock, and calls the core methods it declares.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from journaled.config import ReaderConfig
from journaled.core import retry
from journaled.core.keyorder import KeyOrder, key_of, line_limit, rebuild
from journaled.core.readbehind import LogSource, merge_due, payload_of, read_ids, take_expired
from journaled.core.waiters import Waiter
from journaled.item import Item, is_expired


class Holding:
    """The part of :class:`~journaled.core.readercore.ReaderCore` that holds items out of the
    delivery order: not due yet (``not_before``) or waiting out an abort's delay (``parked``), and
    behind a busy key (``keys``, under ``key_order``).  A base class, so the core's module stays
    within its size; it declares the core's attributes it uses, and the core methods it calls
    (:meth:`_dispose`, :meth:`_hand_off`, :meth:`_pop_waiting`, :meth:`_lost`) are the core's.
    Guarded by ``core.lock`` like the rest."""

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
    journal: LogSource
    errors: dict[int, int]
    saw_expiry: bool

    def _dispose(self, item: Item, kind: str, reason: str = "") -> None:
        raise NotImplementedError  # the core's

    def _hand_off(self) -> None:
        raise NotImplementedError  # the core's

    def _pop_waiting(self) -> Item | None:
        raise NotImplementedError  # the core's

    def charged(self) -> int:
        raise NotImplementedError  # the core's

    def _lost(self, first: int, last: int) -> None:
        raise NotImplementedError  # the core's

    def _next_waiting(self) -> Item | None:
        """The core's next waiting item, once the spilled items whose keys are free are read
        back among the waiting ones (so they go out in id order with them)."""
        self._bring_back()
        return self._pop_waiting()

    def _bring_back(self) -> None:
        """Read back the ``pending`` spilled items (and the next spilled ones of their keys that
        fit in memory) and put the pending ones among the waiting items in id order.  An item the
        journal no longer has (damage) is lost, as read-behind would find it: committed, and its
        key's next item woken in turn."""
        keys = self.keys
        while keys is not None and keys.pending:
            room = self.config.max_memory - self.charged()
            found = read_ids(self.journal, keys.read_plan(room), self.errors)
            back, gone = keys.brought(found, self.clock.monotonic(), room)
            for item_id, key in gone:
                self._lost(item_id, item_id)
                if (nxt := keys.wake(key)) is not None:
                    back.append(nxt)
            self.mem_bytes += merge_due(self.mem, back, self.load_id, self.given_back)

    def _read_back(self, ids: list[int]) -> list[Item]:
        """The items of ``ids`` (ascending), read back from the journal; those it no longer has
        are lost (committed)."""
        found = read_ids(self.journal, ids, self.errors)
        if len(found) < len(ids):
            have = {it.id for it in found}
            for item_id in ids:
                if item_id not in have:
                    self._lost(item_id, item_id)
        return found

    def _in_hand(self) -> bool:
        """Are all the items behind busy keys in memory (none spilled)?"""
        return self.keys is None or not self.keys.spilled

    def _hold(self, item: Item, in_order: bool = False) -> bool:
        """Park ``item`` until its ``not_before``, or expire it if it expires by then; True if so.
        An item with a key arriving under key order is held only at its turn (``in_order``)."""
        if not in_order and self.keys is not None and item.key is not None:
            return False
        if item.not_before is None:
            return False  # perf: due at once (a put with a key or headers only): no clock to read
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
            self._key_free(item)  # an earlier item of its key, lined up behind it, goes first
        if self.parked.park(item, due):
            self.wake_engine()  # its tick sleeps until the earliest due time

    def _line_back(self, item: Item) -> bool:
        """``item``, given back (abort, release), goes to its key's line if it has a key and may
        not go out first: another read of the key is open, or an earlier item of the key waits
        (key order switched on while several reads of a key were open).  Then, with no read of
        the key open any more, the key's first item goes among the waiting ones and blocked gets
        are served.  True if lined up (else the core puts ``item`` back at the head)."""
        keys = self.keys
        if keys is None or (key := key_of(item)) is None or not keys.busy(item.id, key):
            return False
        keys.line_up(item, key, self.clock.monotonic())
        self._key_free(item)
        self._serve_keys()
        return True

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
        """Key order switched off or (re)built (switched on; retention moved the head to ``first``).
        Switched off, the spilled items are read back among the waiting ones (all of them: memory
        drains as they are delivered, read-behind waiting meanwhile)."""
        held = (self.open.values(), self.parked.values(), self.clock.monotonic())
        limit = line_limit(self.config)
        self.keys, plain, back, spilled = rebuild(self.keys, on, first, self.mem, *held, limit)
        if spilled:
            back += self._read_back(spilled)
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
        """``key_order`` changed live: the lines are built (or given back), then waiters served;
        or ``max_memory`` changed: the bound of the lines with it (:func:`line_limit`)."""
        if self.keys is not None and on:
            self.keys.resize(line_limit(self.config), self.clock.monotonic())
        if on != (self.keys is not None):
            self._rekey(on)
            if self.waiters:
                self._hand_off()

    def _expire_lined(self, max_age: float | None, now: float) -> list[Item]:
        """Items behind busy keys expired at ``now``, out of their lines (the core disposes of them)."""
        return [] if self.keys is None else self.keys.take_where(lambda i: is_expired(i, max_age, now))

    def expire_in_memory(self, now: float) -> int:
        """Send every expired item held in memory, wherever it is, to its sink (O(items in
        memory): for a reader about to refuse a put).  Returns how many expired."""
        cfg, count = self.config, 0
        if cfg.max_age is None and not self.saw_expiry:
            return 0
        for it in take_expired(self.mem, cfg.max_age, now):
            self.mem_bytes -= len(it.data)
            self._dispose(it, "expired")
            count += 1
        for it in self._expire_lined(cfg.max_age, now):  # behind a busy key: in memory too
            self._dispose(it, "expired")
            count += 1
        return count

    def _lined_oldest(self) -> Item | None:
        """The item with the smallest id behind a busy key, out of its line (None: none); read
        back if it was spilled (one the journal no longer has is lost, and the next considered)."""
        while self.keys is not None:
            got = self.keys.take_oldest()
            if not isinstance(got, int):
                return got
            found = self._read_back([got])
            if found:
                return found[0]
        return None
