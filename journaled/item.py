"""The value handed to consumers."""

from __future__ import annotations

import datetime as _dt

import attrs

from journaled.errors import ItemTooLarge


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
