"""A read that comes back: the delay it waits out, the clock that times it, where it waits.

:class:`~journaled.core.readercore.ReaderCore` asks these rules (``abort``, ``release``,
``release_due``) and keeps its parked items in a :class:`Parked`; nothing here sees a core. An
aborted item waits ``delay`` seconds, or the reader's backoff when the consumer names none, before
it may be delivered again, and never less than the built-in :func:`floor` once it has failed more
than :data:`FREE_RETRIES` times (so an item aborted again and again is retried at a bounded rate,
whatever the config and the consumer ask); the wait is measured on the monotonic side of the
core's :class:`Clock` (passed in when the core is made: :data:`CLOCK` unless a clock is given;
tests set it to one they move by hand). A parked item is out of the delivery order, so it never
holds back the items behind it; its id stays uncommitted, so the head (and the checkpoint) does
not pass it. The delay lives in memory only: after a crash or reopen a parked item is delivered
again at once, with its error count.

An item put with a ``not_before`` (:attr:`~journaled.item.Item.not_before`) waits the same way
(:func:`not_due`), but its time is in the record, so after a reopen it is parked again when read
back; so is one put while its reader reads behind, which stays on disk until read-behind meets it
in its place (a reader holds no item beyond that point, so none is read back twice).  Once due,
a parked item goes back among the waiting ones in id order (F-41), not simply at the head.  A
parked item stays in memory outside the reader's ``max_memory`` (which bounds the items waiting
in order): its payload plus about 340 bytes for an item not yet due (the item, its metadata, a
dict slot and a heap entry; measured on CPython 3.11), so 1M items put with a delay of 100-byte
payloads to a reader that keeps up hold about 440 MB until they are due.  They are kept whole
because every one must be in hand when it becomes due, or the items behind it would wait for a
read back.
"""

from __future__ import annotations

import heapq
import math
import time
from typing import Final, Protocol

from journaled.config import ReaderConfig
from journaled.errors import UnknownRead
from journaled.item import Item, read_id, with_errors

#: Aborts an item may have (its ``error_count`` after the abort) and still go back at once when
#: nothing asks for a delay: a normal abort and redelivery stays immediate.
FREE_RETRIES = 3
#: The least wait (seconds) after the first abort past :data:`FREE_RETRIES`; it doubles with
#: each further abort, up to :data:`RETRY_FLOOR_MAX`.
RETRY_FLOOR = 0.05
#: The most the floor grows to: a poison item is delivered about once a second at most.
RETRY_FLOOR_MAX = 1.0


class Clock(Protocol):
    """What a reader core reads the time from: ``time()``, the wall clock (expiry,
    ``not_before``), and ``monotonic()``, the clock delays and open reads are timed on."""

    def time(self) -> float: ...
    def monotonic(self) -> float: ...


class SystemClock:
    """The real clocks: ``time.time()`` and ``time.monotonic()``."""

    def time(self) -> float:
        """``time.time()``."""
        return time.time()

    def monotonic(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()


#: The clock a reader core built without one runs on, read when the core is made (so a test
#: that sets it before opening a queue gives every core of that queue its clock; compiled code
#: calls the clock it was given, never a module's ``time``).
CLOCK: Clock = SystemClock()


def default_clock() -> Clock:
    """:data:`CLOCK` as it is now (the module attribute, read at call time)."""
    return CLOCK


#: The longest ``abort`` delay (seconds): about 1,000 years.  Beyond it a delay is a mistake, not
#: a plan, as a ``put`` refuses a due time after the year 9999.
MAX_DELAY: Final = 1000 * 365 * 86400.0


def check_delay(delay: object) -> float | None:
    """``delay`` as seconds (``None``: the reader's backoff); else ``TypeError``/``ValueError``."""
    if delay is None:
        return None
    if isinstance(delay, bool) or not isinstance(delay, (int, float)):
        raise TypeError(f"delay must be a number of seconds or None, got {delay!r}")
    if not (math.isfinite(delay) and delay >= 0):
        raise ValueError(f"delay must be a finite number of seconds >= 0, got {delay!r}")
    if delay > MAX_DELAY:
        raise ValueError(f"delay must be at most {MAX_DELAY:.0f} seconds (about 1,000 years), got {delay!r}")
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


def floor(error_count: int) -> float:
    """The least delay before an item that failed ``error_count`` times is delivered again,
    whatever the reader's backoff or the abort's ``delay`` say: 0 up to :data:`FREE_RETRIES`,
    then ``RETRY_FLOOR * 2 ** (error_count - FREE_RETRIES - 1)``, at most
    :data:`RETRY_FLOOR_MAX` (0.05, 0.1, 0.2, 0.4, 0.8, then 1 s).  So a poison item aborted in a
    tight loop is delivered at most ``FREE_RETRIES + 1`` times at once, then once per floor."""
    if error_count <= FREE_RETRIES:
        return 0.0
    return min(RETRY_FLOOR * 2.0 ** min(error_count - FREE_RETRIES - 1, 64), RETRY_FLOOR_MAX)


def due_time(config: ReaderConfig, error_count: int, delay: float | None, now: float) -> float | None:
    """When (on the monotonic clock, ``now`` being its time now) an item aborted for the
    ``error_count``-th time may be delivered again: after ``delay`` seconds, or the backoff when
    ``delay`` is None, and never before the :func:`floor` for that count.  ``None``: at once."""
    wait = max(backoff(config, error_count) if delay is None else delay, floor(error_count))
    return now + wait if wait > 0 else None


def not_due(item: Item, wall: float, now: float) -> float | None:
    """When (on the monotonic clock, at ``now``) ``item`` may first be delivered, if its
    ``not_before`` is after ``wall`` (the wall clock's time now), else None: it is due."""
    not_before = item.not_before
    if not_before is None or not_before <= wall:
        return None
    # not_before is on the wall clock, delays on the monotonic one: the wait left is carried
    # over as a length.  The core checks not_before on the wall clock again at delivery, so a
    # wall clock stepped back parks the item again (never early); a step forward delays it by
    # at most the step.
    return now + (not_before - wall)


def redelivery(item: Item, error_count: int) -> Item:
    """A fresh object for an item going back to the head: a new delivery handle, so the old one
    can no longer settle the read its next consumer holds."""
    return with_errors(item, error_count)


def open_read(open_reads: dict[int, Item], item: object, reader: str) -> Item:
    """The read of ``open_reads`` (a core's, by id) that ``item`` names, else ``UnknownRead``.
    An :class:`Item` must be the very object handed out for the current delivery (see
    :func:`redelivery`); a bare id names whatever read of it is open."""
    if isinstance(item, Item):
        current = open_reads.get(item.id)
        if current is not item:
            raise UnknownRead(
                f"item {item.id} is not an open read on reader {reader!r}"
                + (" (it was given back and delivered again)" if current is not None else "")
            )
        return current
    current = open_reads.get(item_id := read_id(item))
    if current is None:
        raise UnknownRead(f"item {item_id} is not an open read on reader {reader!r}")
    return current


class Parked(dict[int, Item]):
    """Aborted items waiting out a delay, by id (a dict, read as one), and the heap of their due
    times on the monotonic clock.  Changed only through :meth:`park`, :meth:`unpark_due` and
    :meth:`drop_below`, and only by the core that owns it (under its lock); a seek replaces it
    with an empty one."""

    __slots__ = ("_due",)

    def __init__(self) -> None:
        super().__init__()
        self._due: list[tuple[float, int]] = []

    def park(self, item: Item, due: float) -> bool:
        """Keep ``item`` out of delivery until ``due``; True if it is now the earliest due."""
        first = self._due[0][0] if self._due else math.inf
        self[item.id] = item
        heapq.heappush(self._due, (due, item.id))
        return due < first

    def unpark_due(self, now: float) -> list[Item]:
        """The items due by ``now``, earliest first, no longer parked."""
        due, back = self._due, []
        while due and due[0][0] <= now:
            item = self.pop(heapq.heappop(due)[1], None)
            if item is not None:
                back.append(item)
        return back

    def drop_below(self, first: int) -> list[Item]:
        """Forget the items with an id below ``first`` (retention archived them); returns them."""
        gone = [self.pop(i) for i in [i for i in self if i < first]]
        if gone:
            self._due = [(t, i) for t, i in self._due if i >= first]
            heapq.heapify(self._due)
        return gone

    def next_due(self) -> float | None:
        """When the earliest parked item is due, or None."""
        return self._due[0][0] if self._due else None


__all__ = [
    "CLOCK",
    "FREE_RETRIES",
    "RETRY_FLOOR",
    "RETRY_FLOOR_MAX",
    "Clock",
    "Parked",
    "SystemClock",
    "backoff",
    "check_delay",
    "default_clock",
    "due_time",
    "floor",
    "not_due",
    "open_read",
    "redelivery",
]
