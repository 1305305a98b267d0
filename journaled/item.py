"""The value handed to consumers."""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import operator
from typing import SupportsIndex

import attrs

from journaled.errors import ItemTooLarge
from journaled.format import speedups


@attrs.frozen(slots=True)
class Item:
    """One delivered item (an open read until committed or aborted).

    Attributes:
        id: 64-bit id, strictly increasing in put order within a queue.
        data: the payload, exactly the bytes that were put.
        add_time: when it was put, float seconds since the epoch (ms precision).
        expire_at: when it expires (float epoch seconds), or None.
        error_count: how many times it was aborted on this reader.
    """

    id: int
    data: bytes
    add_time: float
    expire_at: float | None = None
    error_count: int = 0


#: The hot paths' item builders (journaled.format.speedups picks the compiled twins or the references
#: of journaled.format.fallback, built for this class): ``new_item(id, data, add_time, expire_at=None,
#: error_count=0)`` is ``Item(...)`` built faster; ``new_items(first_id, payloads, add_time,
#: expire_at)`` fresh items with consecutive ids; ``items_from_puts(recs, errors, want, overhead)``
#: read-behind's items for decoded PUT records, up to a charge of ``want``.
new_item, new_items, items_from_puts = speedups.item_twins(Item)


def is_expired(item: Item, max_age: float | None, now: float) -> bool:
    """Has ``item`` passed its ``expire_at``, or ``max_age`` since it was added, at ``now``?"""
    if item.expire_at is not None and item.expire_at <= now:
        return True
    return max_age is not None and item.add_time + max_age <= now


def as_payload(data: object, limit: int) -> bytes:
    """``data`` as the bytes of one item, or ``TypeError``/``ItemTooLarge``."""
    if isinstance(data, bytes):
        payload = data
    elif isinstance(data, (bytearray, memoryview)):
        payload = bytes(data)
    else:
        raise TypeError(
            f"items must be bytes, bytearray or memoryview, not {type(data).__name__}"
            " (serialize it first, or use journaled.Queue which pickles)"
        )
    if len(payload) > limit:
        raise ItemTooLarge(len(payload), limit)
    return payload


def epoch_ms(when: float | _dt.datetime) -> int:
    """Epoch milliseconds of a datetime (naive = local time) or of epoch seconds."""
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.astimezone()
        return int(when.timestamp() * 1000)
    return int(when * 1000)


#: The latest expiry a put accepts, in epoch ms: the last millisecond of year 9999 UTC (the end
#: of what a ``datetime`` can name).  Larger values are almost surely a unit mistake.
MAX_EXPIRE_MS = 253_402_300_799_999


def _seconds(name: str, value: object) -> float:
    if type(value) is not float and type(value) is not int:
        # bool is an int, but ttl=True is a mistake, not one second
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:
        raise ValueError(f"{name} {value!r} is out of range") from None
    if not math.isfinite(seconds):
        raise ValueError(f"{name} must be a finite number of seconds, not {value!r}")
    if seconds < 0:
        hint = " (a point in time; use ttl= for a duration)" if name == "expire_at" else ""
        raise ValueError(f"{name} must not be negative, got {value!r}{hint}")
    return seconds


def expire_ms(expire_at: float | _dt.datetime | None, ttl: float | None, now_ms: int) -> int:
    """The expire field of the records a put writes: ``0`` (never) when neither is given, else
    epoch milliseconds, at least 1.

    ``ttl`` is seconds from ``now_ms``; ``expire_at`` is epoch seconds or a datetime (naive =
    local time).  A time at or before now means *already expired*: the items are stored and
    expire on the normal path (never delivered; to ``expire_to`` if set).  Times before 1 ms
    after the epoch (``0``, a 1970 datetime) become 1 ms, because ``0`` is the format's "never".
    Raises ``TypeError`` for a non-number, ``ValueError`` for both given, a negative, NaN or
    infinite number, or a time past :data:`MAX_EXPIRE_MS`.
    """
    if ttl is not None:
        if expire_at is not None:
            raise ValueError("give expire_at or ttl, not both")
        ms = now_ms + int(_seconds("ttl", ttl) * 1000)
    elif expire_at is None:
        return 0
    elif isinstance(expire_at, _dt.datetime):
        try:
            ms = epoch_ms(expire_at)  # before the epoch is allowed: a past time, so expired
        except (OverflowError, ValueError, OSError) as exc:
            raise ValueError(f"expire_at {expire_at!r} is out of range ({exc})") from None
    else:
        ms = int(_seconds("expire_at", expire_at) * 1000)
    if ms > MAX_EXPIRE_MS:
        what = "ttl" if ttl is not None else "expire_at"
        raise ValueError(f"{what} is too far ahead: expiry after the year 9999 ({ms} ms since the epoch)")
    return ms if ms >= 1 else 1


def read_id(item: object) -> int:
    """The id an ``int`` names, for settling a read by id; ``TypeError`` for anything else.

    ``bool`` is an ``int``, but ``commit(True)`` is a mistake, not item 1; so are ``1.0`` and ``"1"``.
    """
    if type(item) is int:
        return item
    if isinstance(item, bool) or not isinstance(item, SupportsIndex):
        raise TypeError(f"expected an Item or an int id, not {type(item).__name__}")
    return operator.index(item)
