"""The value handed to consumers."""

from __future__ import annotations

import datetime as _dt
import math
import numbers
import operator
from collections.abc import Iterable, Mapping
from typing import SupportsIndex, cast

import attrs

from journaled.errors import ItemTooLarge
from journaled.format import metadata, speedups
from journaled.format.metadata import NO_HEADERS, Meta


@attrs.frozen(slots=True)
class Item:
    """One delivered item (an open read until committed or aborted).

    Attributes:
        id: 64-bit id, strictly increasing in put order within a queue.
        data: the payload, exactly the bytes that were put.
        add_time: when it was put, float seconds since the epoch (ms precision).
        expire_at: when it expires (float epoch seconds), or None.
        error_count: how many times it was aborted on this reader.
        headers: name -> bytes, as put (a read-only mapping; empty when none were given).
        key: the bytes naming the item, as put, or None.
        not_before: when it became deliverable (float epoch seconds), if put with a delay.

    An item put with headers, a key or a delay is a :class:`MetaItem`, a subclass.
    """

    id: int
    data: bytes
    add_time: float
    expire_at: float | None = None
    error_count: int = 0

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The item's headers (name -> bytes, read-only), empty when none were put."""
        return NO_HEADERS

    @property
    def key(self) -> bytes | None:
        """The bytes naming the item, or None."""
        return None

    @property
    def not_before(self) -> float | None:
        """When the item became deliverable (epoch seconds), or None when put without a delay."""
        return None

    @property
    def meta(self) -> Meta | None:
        """The item's metadata as stored (headers, key, not-before, producer tag), or None."""
        return None


@attrs.frozen(slots=True)
class MetaItem(Item):
    """An :class:`Item` put with headers, a key or a delay (``stored``: the record's metadata,
    with the producer's tag when the put had one).  An item whose record carries only a producer's
    tag is a plain :class:`Item`: readers have no use for the tag."""

    stored: Meta = Meta()

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The item's headers (name -> bytes, read-only), empty when none were put."""
        return self.stored.headers

    @property
    def key(self) -> bytes | None:
        """The bytes naming the item, or None."""
        return self.stored.key

    @property
    def not_before(self) -> float | None:
        """When the item became deliverable (epoch seconds), or None when put without a delay."""
        ms = self.stored.not_before_ms
        return ms / 1000.0 if ms else None

    @property
    def meta(self) -> Meta | None:
        """The item's metadata as stored (headers, key, not-before, producer tag)."""
        return self.stored


#: The hot paths' item builders (journaled.format.speedups picks the compiled twins or the references
#: of journaled.format.fallback, built for this class): ``new_item(id, data, add_time, expire_at=None,
#: error_count=0)`` is ``Item(...)`` built faster; ``new_items(first_id, payloads, add_time,
#: expire_at)`` fresh items with consecutive ids; ``items_from_puts(recs, errors, want, overhead)``
#: read-behind's items for decoded PUT records, up to a charge of ``want``.
new_item, new_items, items_from_puts = speedups.item_twins(Item, MetaItem)
#: ``new_meta(not_before_ms, producer, sequence, key, headers)`` is ``Meta(...)`` and
#: ``new_meta_item(id, data, add_time, expire_at, error_count, stored)`` ``MetaItem(...)``, built
#: faster (a single put with a key or headers): journaled.format.speedups.meta_twins.
new_meta, new_meta_item = speedups.meta_twins(MetaItem)


def with_errors(item: Item, error_count: int) -> Item:
    """A fresh object for ``item`` with ``error_count`` (its metadata kept)."""
    if type(item) is MetaItem:
        return MetaItem(item.id, item.data, item.add_time, item.expire_at, error_count, item.stored)
    return new_item(item.id, item.data, item.add_time, item.expire_at, error_count)


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


def epoch_ms(when: float | _dt.datetime, up: bool = False) -> int:
    """Epoch milliseconds of a datetime (naive = local time) or of epoch seconds, truncated (or
    rounded ``up``: a not-before is never earlier than asked)."""
    if isinstance(when, _dt.datetime):
        if when.tzinfo is None:
            when = when.astimezone()
        when = when.timestamp()
    return math.ceil(when * 1000) if up else int(when * 1000)


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


def put_headers(headers: object) -> Mapping[str, bytes]:
    """``headers`` as stored: a read-only mapping of names (non-empty ``str``, at most
    :data:`metadata.MAX_HEADER_NAME` bytes of UTF-8) to bytes, at most :data:`metadata.MAX_HEADERS`
    of them and :data:`metadata.MAX_HEADER_BYTES` encoded.  ``TypeError``/``ValueError`` otherwise."""
    return _sized_headers(headers)[0]


def _sized_headers(headers: object) -> tuple[Mapping[str, bytes], int]:
    """:func:`put_headers` and the size of their encoded block (measured once, for the limit):
    :func:`metadata.checked_headers` (or its compiled twin), which checks them."""
    if headers is None:
        return NO_HEADERS, 0
    hdrs, block = speedups.checked_headers(headers)
    return hdrs, len(block)


def put_key(key: object) -> bytes | None:
    """``key`` as stored: 1 to :data:`metadata.MAX_KEY` bytes, or None."""
    if key is None:
        return None
    if isinstance(key, (bytearray, memoryview)):
        key = bytes(key)
    if not isinstance(key, bytes):
        raise TypeError(f"key must be bytes, not {type(key).__name__}")
    if not 1 <= len(key) <= metadata.MAX_KEY:
        raise ValueError(f"key must be 1 to {metadata.MAX_KEY} bytes, got {len(key)}")
    return key


def not_before_ms(not_before: float | _dt.datetime | None, delay: float | None, now_ms: int) -> int:
    """The not-before field of a put: ``0`` (deliverable at once) when neither is given or the
    time is not after ``now_ms``, else epoch ms rounded up (never earlier than asked).  ``delay``
    is seconds from now; ``not_before`` epoch seconds or a datetime (naive = local time).  Raises
    as :func:`expire_ms` does."""
    if delay is not None:
        if not_before is not None:
            raise ValueError("give not_before or delay, not both")
        ms = now_ms + math.ceil(_seconds("delay", delay) * 1000)
    elif not_before is None:
        return 0
    elif isinstance(not_before, _dt.datetime):
        try:
            ms = epoch_ms(not_before, up=True)
        except (OverflowError, ValueError, OSError) as exc:
            raise ValueError(f"not_before {not_before!r} is out of range ({exc})") from None
    else:
        ms = math.ceil(_seconds("not_before", not_before) * 1000)
    if ms > MAX_EXPIRE_MS:
        what = "delay" if delay is not None else "not_before"
        raise ValueError(f"{what} is too far ahead: after the year 9999 ({ms} ms since the epoch)")
    return ms if ms > now_ms else 0


def check_record_size(payload: bytes, meta: Meta) -> None:
    """``ItemTooLarge`` when ``payload`` with ``meta`` would not fit one record's body."""
    extra = metadata.encoded_size(meta)
    if len(payload) + extra > metadata.MAX_PAYLOAD_WITH_META:
        raise ItemTooLarge(len(payload), metadata.MAX_PAYLOAD_WITH_META - extra)


def put_metas(
    payloads: list[bytes],
    now_ms: int,
    not_before: float | _dt.datetime | None,
    delay: float | None,
    headers: object,
    keys: object,
    producer: object,
) -> list[Meta | None] | None:
    """The metadata of each item of one put (None: a plain PUT), or None when no item has any.

    ``headers`` and the not-before time apply to every item, ``keys`` is one key (or None) per
    item, ``producer`` is ``(producer id, first sequence)``: item *i* is tagged ``first + i``.
    Raises ``TypeError``/``ValueError``/``ItemTooLarge`` before anything is stored."""
    nb = not_before_ms(not_before, delay, now_ms)
    hdrs, header_size = _sized_headers(headers)
    count = len(payloads)
    if keys is None:
        key_list: list[bytes | None] = [None] * count
    else:
        if isinstance(keys, (bytes, bytearray, memoryview, str)):
            raise TypeError("keys must be a sequence of one key per item (use key= for put)")
        key_list = [put_key(k) for k in cast("Iterable[object]", keys)]
        if len(key_list) != count:
            raise ValueError(f"{len(key_list)} keys for {count} items: give one key (or None) per item")
    pid = first = 0
    if producer is not None:
        pid, first = producer_tag(producer, count)
    if not (nb or hdrs or pid or keys is not None):
        return None
    metas: list[Meta | None] = []
    fixed = metadata.META_FIXED_SIZE + header_size
    for i, (payload, key) in enumerate(zip(payloads, key_list)):
        meta = Meta(nb, pid, first + i if pid else 0, key, hdrs)
        if meta.empty:
            metas.append(None)
            continue
        extra = fixed + (0 if key is None else len(key))  # metadata.encoded_size(meta)
        if len(payload) + extra > metadata.MAX_PAYLOAD_WITH_META:
            raise ItemTooLarge(len(payload), metadata.MAX_PAYLOAD_WITH_META - extra)
        metas.append(meta)
    return metas


def producer_tag(producer: object, count: int) -> tuple[int, int]:
    """``(producer id, first sequence)`` checked: the id 1..2**64-1, the sequences of ``count``
    items within 0..2**64-1."""
    if not (isinstance(producer, tuple) and len(producer) == 2):
        raise TypeError("producer must be a tuple (producer id, first sequence) of two ints")
    pid, first = producer
    if type(pid) is not int or type(first) is not int:
        raise TypeError("producer must be a tuple (producer id, first sequence) of two ints")
    if not 0 < pid < 1 << 64 or not 0 <= first <= (1 << 64) - max(count, 1):
        raise ValueError(f"producer {producer!r} is out of range (id 1..2**64-1, sequences 0..2**64-1)")
    return pid, first


def with_meta(item: Item, meta: Meta | None) -> Item:
    """``item`` carrying ``meta`` (a :class:`MetaItem`), or ``item`` itself for None."""
    if meta is None:
        return item
    return MetaItem(item.id, item.data, item.add_time, item.expire_at, item.error_count, meta)
