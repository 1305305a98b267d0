"""The value handed to consumers."""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex

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


# --------------------------------------------------------------------------------- fast paths
# perf: attrs' generated __init__ for a frozen slots class sets each field through
# ``object.__setattr__`` (an attribute lookup per field); calling the slot descriptors directly
# builds the same object several times faster.  Item has no validators, converters or
# __attrs_post_init__, so nothing is skipped; the check below fails loudly at import if a field
# is ever added without updating these helpers.
_FIELDS = ("id", "data", "add_time", "expire_at", "error_count")
if tuple(a.name for a in attrs.fields(Item)) != _FIELDS:  # pragma: no cover - a developer error
    raise TypeError("journaled.item: update new_item/new_items for Item's fields")
_new = object.__new__
_slots = vars(Item)  # the member descriptors of the slots
_set_id = _slots["id"].__set__
_set_data = _slots["data"].__set__
_set_add_time = _slots["add_time"].__set__
_set_expire_at = _slots["expire_at"].__set__
_set_error_count = _slots["error_count"].__set__


def new_item(
    id: int, data: bytes, add_time: float, expire_at: float | None = None, error_count: int = 0
) -> Item:
    """``Item(id, data, add_time, expire_at, error_count)``, built faster (hot paths only)."""
    item: Item = _new(Item)
    _set_id(item, id)
    _set_data(item, data)
    _set_add_time(item, add_time)
    _set_expire_at(item, expire_at)
    _set_error_count(item, error_count)
    return item


def new_items(first_id: int, payloads: list[bytes], add_time: float, expire_at: float | None) -> list[Item]:
    """Fresh items ``first_id, first_id + 1, ...`` for ``payloads`` (error count 0)."""
    new, set_id, set_data = _new, _set_id, _set_data
    set_add_time, set_expire_at, set_error_count = _set_add_time, _set_expire_at, _set_error_count
    out: list[Item] = []
    append = out.append
    item_id = first_id
    for data in payloads:
        item = new(Item)
        set_id(item, item_id)
        set_data(item, data)
        set_add_time(item, add_time)
        set_expire_at(item, expire_at)
        set_error_count(item, 0)
        append(item)
        item_id += 1
    return out


def items_from_puts(
    recs: Sequence[Any], errors: Mapping[int, int], want: int, overhead: int
) -> tuple[list[Item], int, bool]:
    """Read-behind's items for decoded PUT records (``record.Put``), in order: each charged
    ``len(payload) + overhead``, stopping before the record that would take the total past
    ``want`` (the first always goes); error counts from ``errors``.  Returns the items, their
    total charge, and whether any of them expires."""
    out: list[Item] = []
    total = 0
    expiring = False
    for rec in recs:
        payload = rec.payload
        charge = len(payload) + overhead
        if out and total + charge > want:
            break
        total += charge
        expire_ms = rec.expire_ms
        if expire_ms:
            expiring = True
        out.append(
            new_item(
                rec.id,
                payload,
                rec.add_ms / 1000.0,
                expire_ms / 1000.0 if expire_ms else None,
                errors.get(rec.id, 0),
            )
        )
    return out, total, expiring


#: The pure-Python references of :func:`new_item`, :func:`new_items` and
#: :func:`items_from_puts` (journaled.format.speedups says which implementation runs).
py_new_item = new_item
py_new_items = new_items
py_items_from_puts = items_from_puts
if speedups.native is not None:
    speedups.native.configure_items(Item, _FIELDS, py_new_items, py_new_item)
    new_item = speedups.native.new_item  # noqa: F811
    new_items = speedups.native.new_items  # noqa: F811
    if hasattr(speedups.native, "items_from_puts"):  # an extension built before it existed lacks it
        speedups.native.configure_refill(py_items_from_puts)
        items_from_puts = speedups.native.items_from_puts  # noqa: F811


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
