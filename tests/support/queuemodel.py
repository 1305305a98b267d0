"""A plain model of what a journaled queue promises its readers, for the whole-queue state machines
(tests/whole/test_queue_model.py, tests/whole/test_queue_model_procs.py).

It knows nothing of how the library works: only the promises of README.md, docs/design.md and
docs/format.md (F-31, F-32, F-41 for delivery, F-36 for retention, section 14 for dead letters).
Per reader it keeps which ids it must still get, which it may get, in which order and with
which error count; the machine asks it, at each delivery, whether that delivery is allowed
(:meth:`ReaderModel.check_delivery`) and, at each ``Empty``, whether nothing was due
(:meth:`ReaderModel.due_now`).

Time is a :class:`ModelClock` in whole milliseconds, patched into the library's modules: the wall
clock reads ``ms + 0.5`` ms, so no add, due or expiry time (all whole ms) is ever exactly "now",
and the model's "is it due" is never a question of float rounding.  The monotonic clock that
abort delays are timed on moves with it; an abort delay ending exactly at a tick is "may be due"
(both answers are accepted), one tick later "must be due".

Key order (``ReaderConfig(key_order=True)``, docs/design.md "Key order"), a setting the machine turns
on and off live: an item with a key may be delivered only while no other item of its key is open
and every item of its key with a smaller id is gone (or expired, or past ``max_errors``: those leave
when met); one that may be gone (settled before a crash, or a doomed one) lets it through but does
not make it due.  A key's item given back while another read of its key is open waits in id order
(it is fresh, not returned); switching key order on makes the returned items with a key fresh.

Vocabulary: an item is *fresh* for a reader when it waits in id order (never delivered since the
last reopen or seek, or brought back by them); *returned* when an abort or a release without a
delay put it back at the head (a stack: the newest return is the next delivery); *delayed* when
an abort's delay (or the retry floor) holds it; *gone* when it must never be delivered to that
reader again (committed, dead-lettered, rejected, expired, below a seek or retention).
"""

from __future__ import annotations

import math
import time as _time
from collections.abc import Iterable, Mapping
from typing import Any

import attrs

from journaled.core import retry

#: The model clock's start (2026-01-01T00:00:00Z), the same in every run.
EPOCH_MS = 1_767_225_600_000
#: Its monotonic clock at that start, fixed too: deadlines are sums of it and delays, so their
#: float rounding is the same in every run.
MONO0 = 1_000_000.0


class ModelClock:
    """The ``time`` module as the library's modules see it in a model run: ``time()``,
    ``time_ns()`` and ``monotonic()`` move only by :meth:`advance` (whole ms); everything else
    (``sleep``, ``perf_counter``) is the real module's."""

    def __init__(self) -> None:
        # a fixed start, whole seconds (not_before values stay exact): the add times go into
        # every record's CRC, so a start read from the real clock made each run's records differ
        self.ms = EPOCH_MS

    def time(self) -> float:
        return (self.ms + 0.5) / 1000.0

    def time_ns(self) -> int:
        return self.ms * 1_000_000 + 500_000

    def monotonic(self) -> float:
        return MONO0 + (self.ms - EPOCH_MS + 0.5) / 1000.0

    def advance(self, ms: int) -> None:
        self.ms += ms

    def __getattr__(self, name: str) -> Any:
        return getattr(_time, name)


@attrs.define
class Spec:
    """One stored item, as put: what every delivery of it must carry."""

    id: int
    data: bytes | None  # None: a dead-letter envelope whose bytes the model learns at delivery
    add_ms: int
    expire_ms: int = 0  # 0: never
    not_before_ms: int = 0  # 0: none
    key: bytes | None = None
    headers: Mapping[str, bytes] = attrs.field(factory=dict)
    envelope: bool = False

    def expired(self, now_ms: int) -> bool:
        """F-31/F-41: expired at ``now_ms``, or expiring before it is ever due."""
        if not self.expire_ms:
            return False
        return self.expire_ms <= now_ms or (self.not_before_ms > 0 and self.expire_ms <= self.not_before_ms)

    def due(self, now_ms: int) -> bool:
        return self.not_before_ms <= now_ms


@attrs.define
class Open:
    """An open read: the handle ``get`` returned and the error count it carried."""

    handle: Any
    errors: int


class Refused(AssertionError):
    """A delivery (or an ``Empty``) the promises do not allow."""


@attrs.define
class ReaderModel:
    """One reader's promises."""

    name: str
    start: int  # ids below were never this reader's
    max_errors: int | None = None
    dead_letter: str | None = None  # "self", "dlq" or None
    key_order: bool = False
    gone: set[int] = attrs.field(factory=set)
    open: dict[int, Open] = attrs.field(factory=dict)
    returned: list[int] = attrs.field(factory=list)  # top of the stack last
    delayed: dict[int, int] = attrs.field(factory=dict)  # id -> due tick (ms; "may" at, "must" after)
    errors: dict[int, tuple[int, int]] = attrs.field(factory=dict)  # id -> (least, most) error count
    maybe: set[int] = attrs.field(factory=set)  # settled before a crash, after the last checkpoint
    doomed: set[int] = attrs.field(factory=set)  # reached a lowered max_errors: may be dead-lettered
    since_ckpt: set[int] = attrs.field(factory=set)  # settled since the last checkpoint
    ckpt_errors: dict[int, tuple[int, int]] = attrs.field(factory=dict)
    lost_to_retention: int = 0
    committed: int = 0
    dead_lettered: int = 0
    rejected: int = 0

    # ------------------------------------------------------------------ what may come next
    def error_range(self, item_id: int) -> tuple[int, int]:
        return self.errors.get(item_id, (0, 0))

    def _status(self, spec: Spec, now_ms: int) -> str:
        """ "must", "may" or "never": whether ``spec`` has to be delivered now if it is next."""
        if spec.expired(now_ms) or not spec.due(now_ms):
            return "never"
        if self.max_errors is not None:
            lo, hi = self.error_range(spec.id)
            if lo >= self.max_errors:
                return "never"  # dead-lettered at the head (design.md, "Poison items")
            if hi >= self.max_errors:
                return "may"
        return "may" if spec.id in self.maybe or spec.id in self.doomed else "must"

    def fresh(self, items: Mapping[int, Spec]) -> list[int]:
        """Ids waiting in id order (F-31, F-41)."""
        held = self.open.keys() | set(self.returned) | self.delayed.keys()
        return [i for i in sorted(items) if i >= self.start and i not in self.gone and i not in held]

    def key_lines(
        self, items: Mapping[int, Spec], now_ms: int
    ) -> dict[bytes, tuple[set[int], list[tuple[int, bool]]]]:
        """Under key order, per key: its open reads, and its other ids still to be delivered in id
        order, each with whether it may be gone already (``soft``).  Empty when key order is off."""
        out: dict[bytes, tuple[set[int], list[tuple[int, bool]]]] = {}
        if not self.key_order:
            return out
        for i in sorted(items):
            spec = items[i]
            if spec.key is None or i < self.start or i in self.gone:
                continue
            opens, pending = out.setdefault(spec.key, (set(), []))
            if i in self.open:
                opens.add(i)
                continue
            lo, hi = self.error_range(i)
            if spec.expired(now_ms) or (self.max_errors is not None and lo >= self.max_errors):
                continue  # leaves when a take meets it, before anything behind it
            soft = (
                i in self.maybe or i in self.doomed or (self.max_errors is not None and hi >= self.max_errors)
            )
            pending.append((i, soft))
        return out

    @staticmethod
    def blocked(i: int, items: Mapping[int, Spec], lines: Mapping[bytes, Any]) -> tuple[bool, bool]:
        """(``i`` may not be delivered now for its key, ``i`` is not due for its key): another read
        of its key is open or an earlier item of it waits; an earlier one may be gone."""
        key = items[i].key
        if key is None or key not in lines:
            return False, False
        opens, pending = lines[key]
        if opens - {i}:
            return True, False
        soft = False
        for j, may_be_gone in pending:
            if j >= i:
                break
            if not may_be_gone:
                return True, False
            soft = True
        return False, soft

    def candidates(self, items: Mapping[int, Spec], now_ms: int) -> tuple[set[int], bool]:
        """The ids the next delivery may be, and whether ``Empty`` would break a promise."""
        allowed: set[int] = set()
        must = False
        lines = self.key_lines(items, now_ms)
        for i, due_ms in self.delayed.items():  # a delay that ended is back at the head
            st = self._status(items[i], now_ms)
            hard, soft = self.blocked(i, items, lines)
            if due_ms <= now_ms and st != "never" and not hard:
                allowed.add(i)
                must = must or (due_ms < now_ms and st == "must" and not soft)
        first, first_must = self._first_must(items, now_ms, lines)
        allowed |= first
        return allowed, must or first_must

    def _first_must(
        self, items: Mapping[int, Spec], now_ms: int, lines: Mapping[bytes, Any]
    ) -> tuple[set[int], bool]:
        """The returned stack from its top, then the fresh ids in order: every id up to and
        including the first that must be delivered, skipping the ones that may not be (under key
        order, those whose key is busy); and whether one must."""
        out: set[int] = set()
        for i in [*reversed(self.returned), *self.fresh(items)]:
            st = self._status(items[i], now_ms)
            if st == "never":
                continue
            hard, soft = self.blocked(i, items, lines)
            if hard:
                continue
            out.add(i)
            if st == "must" and not soft:
                return out, True
        return out, False

    def due_now(self, items: Mapping[int, Spec], now_ms: int) -> bool:
        """True when some item must be delivered now (so ``Empty`` is a lost item)."""
        return self.candidates(items, now_ms)[1]

    def check_delivery(self, item: Any, items: Mapping[int, Spec], now_ms: int) -> None:
        """Raise :class:`Refused` unless delivering ``item`` now keeps every promise; then record it."""
        lines = self.key_lines(items, now_ms)
        if self.key_order and item.id in items and (key := items[item.id].key) is not None:
            opens, pending = lines.get(key, (set(), []))
            if opens - {item.id}:
                raise Refused(
                    f"{self.name}: id {item.id} of key {key!r} delivered while {sorted(opens)} is open"
                )
            earlier = [j for j, may_be_gone in pending if j < item.id and not may_be_gone]
            if earlier:
                raise Refused(
                    f"{self.name}: id {item.id} of key {key!r} delivered before {earlier} (key order)"
                )
        allowed, _ = self.candidates(items, now_ms)
        if item.id not in allowed:
            why = "never this reader's or gone" if item.id in self.gone or item.id < self.start else ""
            why = why or ("open already (a duplicate)" if item.id in self.open else "")
            spec = items.get(item.id)
            raise Refused(
                f"{self.name}: delivered id {item.id} {why}; allowed now: {sorted(allowed)} "
                f"(returned {self.returned}, delayed {self.delayed}, open {sorted(self.open)}); "
                f"now {now_ms}, the item: {spec}, error_count {item.error_count}, model errors "
                f"{self.error_range(item.id)}, max_errors {self.max_errors}, maybe {item.id in self.maybe}"
            )
        lo, hi = self.error_range(item.id)
        if not lo <= item.error_count <= hi:
            raise Refused(f"{self.name}: id {item.id} error_count {item.error_count}, want {lo}..{hi}")
        spec = items[item.id]
        check_metadata(self.name, item, spec)
        # every id passed over on the way to this one had only "may" (or was never due): settled.
        # An item whose delay ended comes from outside that order and passes over nothing.
        order = [*reversed(self.returned), *self.fresh(items)]
        for i in order if item.id in order else ():
            if i == item.id:
                break
            if i in self.maybe and self.blocked(i, items, lines) == (False, False):
                self.maybe.discard(i)
                self.gone.add(i)
        key = items[item.id].key if self.key_order else None
        for j, _ in lines.get(key, (set(), []))[1] if key is not None else ():
            if j < item.id:  # an earlier item of its key that may be gone: it is, or this would wait
                self.maybe.discard(j)
                self.doomed.discard(j)
                self.gone.add(j)
                self.errors.pop(j, None)
                if j in self.returned:
                    self.returned.remove(j)
                self.delayed.pop(j, None)
        if item.id in self.returned:
            self.returned.remove(item.id)
        self.delayed.pop(item.id, None)
        self.maybe.discard(item.id)
        self.doomed.discard(item.id)
        self.errors[item.id] = (item.error_count, item.error_count)
        self.open[item.id] = Open(item, item.error_count)

    # ------------------------------------------------------------------ settling reads
    def settle(self, item_id: int) -> None:
        self.gone.add(item_id)
        self.errors.pop(item_id, None)
        self.since_ckpt.add(item_id)

    def commit(self, item_id: int) -> None:
        del self.open[item_id]
        self.settle(item_id)
        self.committed += 1

    def key_busy(self, item_id: int, items: Mapping[int, Spec]) -> bool:
        """Under key order: another read of ``item_id``'s key is open (given back, it waits in id
        order, not at the head)."""
        key = items[item_id].key
        return (
            self.key_order and key is not None and any(items[j].key == key for j in self.open if j != item_id)
        )

    def set_key_order(self, on: bool, items: Mapping[int, Spec]) -> None:
        """Key order switched on (the returned items with a key wait in id order now) or off."""
        if on and not self.key_order:
            self.returned = [i for i in self.returned if items[i].key is None]
        self.key_order = on

    def abort(self, item_id: int, delay_ms: int | None, now_ms: int, busy_key: bool = False) -> str:
        """Model an abort; returns what became of the item: "dead", "returned", "fresh" (its key
        busy under key order) or "delayed"."""
        count = self.open.pop(item_id).errors + 1
        self.errors[item_id] = (count, count)
        if self.max_errors is not None and count >= self.max_errors:
            self.settle(item_id)
            self.dead_lettered += 1
            return "dead"
        wait_ms = max(delay_ms or 0, _floor_ms(count))
        if wait_ms == 0 and not delay_ms:
            if busy_key:
                return "fresh"
            self.returned.append(item_id)
            return "returned"
        self.delayed[item_id] = now_ms + wait_ms
        return "delayed"

    def release(self, item_id: int, busy_key: bool = False) -> None:
        self.open.pop(item_id)
        if not busy_key:
            self.returned.append(item_id)

    def reject(self, item_id: int) -> None:
        del self.open[item_id]
        self.settle(item_id)
        self.rejected += 1

    # ------------------------------------------------------------------ whole-reader events
    def checkpointed(self) -> None:
        self.since_ckpt = set()
        self.ckpt_errors = dict(self.errors)

    def reopened(self, crashed: bool) -> None:
        """A clean reopen brings back every uncommitted id in id order (returns, delays and open
        reads included, delays forgotten); a crash also may bring back the ids settled after the
        last checkpoint, and error counts fall back as far as that checkpoint's."""
        self.open, self.returned, self.delayed = {}, [], {}
        if crashed:
            self.maybe = (self.maybe | self.since_ckpt) & self.gone
            self.gone -= self.maybe
            merged: dict[int, tuple[int, int]] = {}
            for i in self.errors.keys() | self.ckpt_errors.keys() | self.maybe:
                lo = self.ckpt_errors.get(i, (0, 0))[0]
                hi = max(self.errors.get(i, (0, 0))[1], self.ckpt_errors.get(i, (0, 0))[1])
                merged[i] = (min(lo, hi), hi)
            self.errors = merged
            self.since_ckpt = set(self.maybe)
            self.ckpt_errors = dict(merged)
        else:
            self.maybe = set()
            self.checkpointed()  # a clean close writes every reader's checkpoint

    def sought(self, head: int, items: Iterable[int]) -> None:
        """``seek``: everything from ``head`` on again, nothing below; error counts and delays
        forgotten, open reads taken back."""
        self.open, self.returned, self.delayed, self.errors, self.maybe = {}, [], {}, {}, set()
        self.doomed = set()
        self.gone = {i for i in items if i < head}
        self.start = min(self.start, head)
        self.since_ckpt = set()

    def retention_moved(self, keep: int, items: Mapping[int, Spec], now_ms: int) -> tuple[int, int]:
        """Files below ``keep`` were archived past retention: only the head may move (F-36,
        issue 34 point 4).  Returns the least and most the reader's lost count may grow by
        (an item that expired meanwhile, or whose error count reached ``max_errors`` and which a
        take may have dead-lettered, may or may not have been counted)."""
        lo = hi = 0
        for i in list(items):
            if i < keep and i >= self.start and i not in self.gone and i not in self.open:
                at_limit = self.max_errors is not None and self.error_range(i)[1] >= self.max_errors
                if i in self.maybe or i in self.doomed or at_limit or items[i].expired(now_ms):
                    hi += 1  # perhaps settled, dead-lettered by a take, or expired: not counted then
                else:
                    lo += 1
                    hi += 1
                self.gone.add(i)
                self.maybe.discard(i)
                self.doomed.discard(i)
                self.errors.pop(i, None)
                if i in self.returned:
                    self.returned.remove(i)
                self.delayed.pop(i, None)
        return lo, hi


def _floor_ms(error_count: int) -> int:
    """The retry floor (README: "a bounded rate"), rounded up to a whole ms."""
    return int(math.ceil(retry.floor(error_count) * 1000))


def check_metadata(reader: str, item: Any, spec: Spec) -> None:
    """Every delivery carries the item as put: payload, key, headers, add time, expiry, not-before."""
    where = f"{reader}: id {item.id}"
    if spec.envelope:
        return  # checked against the dead letters by the machine
    if item.data != spec.data:
        raise Refused(f"{where}: payload {item.data[:16]!r}..., want {(spec.data or b'')[:16]!r}...")
    if item.key != spec.key:
        raise Refused(f"{where}: key {item.key!r}, want {spec.key!r}")
    if dict(item.headers) != dict(spec.headers):
        raise Refused(f"{where}: headers {dict(item.headers)}, want {dict(spec.headers)}")
    if round(item.add_time * 1000) != spec.add_ms:
        raise Refused(f"{where}: add_time {item.add_time}, want {spec.add_ms} ms")
    want_exp = spec.expire_ms / 1000 if spec.expire_ms else None
    if (item.expire_at is None) != (want_exp is None) or (
        want_exp is not None and round(item.expire_at * 1000) != spec.expire_ms
    ):
        raise Refused(f"{where}: expire_at {item.expire_at}, want {want_exp}")
    nb = getattr(item, "not_before", None)
    if spec.not_before_ms and (nb is None or round(nb * 1000) != spec.not_before_ms):
        raise Refused(f"{where}: not_before {nb}, want {spec.not_before_ms} ms")


@attrs.define
class DedupModel:
    """The key window (README: "within the window: the same id, nothing stored")."""

    window_ms: int | None
    keys: dict[bytes, tuple[int, int]] = attrs.field(factory=dict)  # key -> (id, add_ms)

    def lookup(self, key: bytes | None, now_ms: int) -> tuple[int | None, bool]:
        """The id a put of ``key`` at ``now_ms`` must return instead of storing, if any, and
        whether that is certain: a put exactly one window after the first (to the ms the add
        times are kept in) may go either way."""
        if key is None or self.window_ms is None or key not in self.keys:
            return None, True
        item_id, at = self.keys[key]
        age = now_ms - at
        if age == self.window_ms:
            return item_id, False
        return (item_id if age < self.window_ms else None), True

    def stored(self, key: bytes | None, item_id: int, add_ms: int) -> None:
        if key is not None:
            self.keys[key] = (item_id, add_ms)


__all__ = ["DedupModel", "ModelClock", "Open", "ReaderModel", "Refused", "Spec", "check_metadata"]
