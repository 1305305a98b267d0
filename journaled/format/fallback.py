"""The pure-Python twin of ``_speedups.c``: the reference of every compiled hot loop, in one place.

Each function here says ``compiled twin: _speedups.c, section X``, and section X of the C file
names it back.  These are the references in the strong sense: the compiled twins hand anything off
their fast path (an argument of another type, a number outside its field, a record that is not a
well-formed PUT) to the function here, so the two return the same values and raise the same errors
by construction; tests/format/test_speedups.py checks it with hypothesis.  They are also the
fallback: journaled.format.speedups (the one switch) selects them where the extension is not built,
is stale, or ``JOURNALED_PURE_PYTHON=1``.

* :func:`encode_puts`, :func:`decode_many`: the journal's write and read loops, the batch forms
  of format/record.py's single-record ``encode_put`` and ``decode_one``;
* :func:`walk_puts`: the record walker's loop over decode_many's records (journaled.log.walker);
* :func:`decode_columns`: PUT and PUTX records into the Arrow column buffers of
  format/columns.py;
* :func:`item_references`: ``new_item``, ``new_items`` and ``items_from_puts`` for the item class
  it is given.  The class is a parameter because journaled.item, which defines ``Item``, imports the
  switch: importing it from here would close an import cycle, and format/ imports nothing above it.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol, TypeVar

import attrs
from attrs import AttrsInstance
from crc32c import crc32c

from journaled.format import metadata
from journaled.format.columns import DONE, FULL, MAX_BATCH_BYTES, MORE, Columns
from journaled.format.metadata import Meta
from journaled.format.record import (
    CRC_STRUCT,
    MAX_BODY,
    PUT_FIELDS_SIZE,
    PUT_FIELDS_STRUCT,
    PUT_HEADER_STRUCT,
    PUT_OVERHEAD,
    PUT_TAIL_STRUCT,
    PUTX_FIELDS_SIZE,
    PUTX_KEY_LEN_AT,
    PUTX_NOT_BEFORE_AT,
    PUTX_OVERHEAD,
    RECORD_HEADER_SIZE,
    RECORD_HEADER_STRUCT,
    TYPE_PUT,
    TYPE_PUTX,
    Damage,
    Decoded,
    Put,
    PutX,
    Unit,
    decode_one,
    encode_record,
)

__all__ = [
    "ITEM_FIELDS",
    "decode_columns",
    "decode_many",
    "encode_puts",
    "encode_putx",
    "item_references",
    "walk_puts",
]

# ----------------------------------------------------------------------- encode_puts, decode_many


def encode_puts(
    salt: int,
    offset: int,
    first_id: int,
    add_ms: int,
    expire_ms: int,
    payloads: Sequence[bytes],
    out: bytearray,
) -> list[int]:
    """Append PUT records for ``payloads`` (consecutive ids) to ``out``; return their offsets.

    compiled twin: _speedups.c, section encode_puts (journaled.format.speedups.encode_puts is the
    one callers use).

    The batch form of :func:`encode_put`, kept in one loop with local names because this is the
    hottest code in the library.
    """
    # perf: the CRC is chained over (header tail, payload) instead of over a copy of the
    # record in ``out``: crc32c(a + b, seed) == crc32c(b, crc32c(a, seed)).  That makes each
    # record two pack calls, two CRC calls and three appends, with no memoryview and no
    # zero-filled placeholder; the bytes are identical to encode_put's.
    pack_tail = PUT_TAIL_STRUCT.pack
    pack_crc = CRC_STRUCT.pack
    overhead = PUT_HEADER_STRUCT.size
    fields_size = PUT_FIELDS_SIZE
    offsets: list[int] = []
    append_offset = offsets.append
    item_id = first_id
    for payload in payloads:
        n = len(payload)
        append_offset(offset)
        tail = pack_tail(fields_size + n, TYPE_PUT, item_id, add_ms, expire_ms)
        out += pack_crc(crc32c(payload, crc32c(tail, (salt ^ offset) & 0xFFFFFFFF)))
        out += tail
        out += payload
        offset += overhead + n
        item_id += 1
    return offsets


def encode_putx(
    salt: int,
    offset: int,
    item_id: int,
    add_ms: int,
    expire_ms: int,
    meta: bytes,
    payload: bytes,
    out: bytearray,
) -> None:
    """Append to ``out`` the PUTX record of item ``item_id`` at ``offset``: its body is the PUT
    fields, ``meta`` (``metadata.encode`` of the item's metadata) and ``payload``.

    compiled twin: _speedups.c, section encode_putx (journaled.format.speedups.encode_putx is the
    one callers use).
    """
    body = PUT_FIELDS_STRUCT.pack(item_id, add_ms, expire_ms) + meta + payload
    out += encode_record(salt, offset, TYPE_PUTX, body)


_put_slots = vars(Put)
_put_setters = tuple(_put_slots[a.name].__set__ for a in attrs.fields(Put))
if tuple(a.name for a in attrs.fields(Put)) != ("offset", "size", "id", "add_ms", "expire_ms", "payload"):
    raise TypeError("journaled.format.fallback: update _new_put for Put's fields")  # pragma: no cover


def _new_put(offset: int, size: int, item_id: int, add_ms: int, expire_ms: int, payload: bytes) -> Put:
    """``Put(...)`` without attrs' __init__ (perf: decoding is on the read hot path; Put has no
    validators or converters, and its setters come from ``attrs.fields`` in field order)."""
    put: Put = object.__new__(Put)
    s_offset, s_size, s_id, s_add, s_expire, s_payload = _put_setters
    s_offset(put, offset)
    s_size(put, size)
    s_id(put, item_id)
    s_add(put, add_ms)
    s_expire(put, expire_ms)
    s_payload(put, payload)
    return put


def decode_many(
    buf: bytes | bytearray | memoryview,
    base_offset: int,
    salt: int,
    pos: int = 0,
    max_body: int = MAX_BODY,
    limit: int | None = None,
) -> tuple[list[Decoded], int, Damage | None]:
    """Decode consecutive records from ``buf[pos:]``.

    compiled twin: _speedups.c, section decode_many (journaled.format.speedups.decode_many is the
    one callers use).

    Returns ``(records, end, damage)``: ``end`` is the buffer position after the last good
    record, and ``damage`` says why decoding stopped early (``None`` if the buffer ended exactly
    on a record boundary, ``limit`` records were decoded, or the last record is a compressed
    :class:`Unit`: decoding stops after one, still compressed).
    """
    out: list[Decoded] = []
    n = len(buf)
    # perf: well-formed PUT records (nearly all of them) are decoded inline here, with one
    # memoryview for the whole buffer and Put built from its slots; anything else -- another
    # type, a bad length, a short buffer, a CRC mismatch -- goes through decode_one, which
    # classifies it exactly as before.  Only records whose CRC verified are ever returned.
    view = memoryview(buf)
    try:
        unpack_hdr, unpack_fields = RECORD_HEADER_STRUCT.unpack_from, PUT_FIELDS_STRUCT.unpack_from
        as_bytes = type(buf) is bytes
        min_body = PUT_FIELDS_SIZE
        append = out.append
        count = 0
        while pos < n and (limit is None or count < limit):
            if pos + PUT_OVERHEAD <= n:
                crc, length, rtype = unpack_hdr(buf, pos)
                end = pos + RECORD_HEADER_SIZE + length
                offset = base_offset + pos
                if (
                    rtype == TYPE_PUT
                    and min_body <= length <= max_body
                    and end <= n
                    and crc32c(view[pos + 4 : end], (salt ^ offset) & 0xFFFFFFFF) == crc
                ):
                    item_id, add_ms, expire_ms = unpack_fields(buf, pos + RECORD_HEADER_SIZE)
                    payload = (
                        buf[pos + PUT_OVERHEAD : end] if as_bytes else bytes(view[pos + PUT_OVERHEAD : end])
                    )
                    append(_new_put(offset, end - pos, item_id, add_ms, expire_ms, payload))  # type: ignore[arg-type]
                    pos = end
                    count += 1
                    continue
            rec = decode_one(buf, pos, base_offset, salt, max_body)
            if isinstance(rec, Damage):
                return out, pos, rec
            append(rec)
            pos += rec.size
            count += 1
            if isinstance(rec, Unit):
                break  # the walker decompresses it (format/compressed.py); nothing past it is decoded
    finally:
        view.release()
    return out, pos, None


# -------------------------------------------------------------------------------------- walk_puts


def walk_puts(
    buf: bytes | bytearray,
    base_offset: int,
    salt: int,
    pos: int,
    expected: int,
    max_items: int,
    max_bytes: int,
    nbytes: int,
    first_free: bool,
) -> tuple[list[Put], int, int, int, bool, int, Damage | None]:
    """The record walker's per-record loop (journaled.log.walker): decode at most ``max_items``
    records from ``buf[pos:]`` (``buf`` lies at file offset ``base_offset``) and keep the PUTs
    with an id at or above ``expected`` while their payloads fit ``max_bytes`` with the
    ``nbytes`` already taken (the first one kept always fits when ``first_free``).

    compiled twin: _speedups.c, section walk_puts (journaled.format.speedups.walk_puts is the one
    callers use).

    Returns ``(puts, pos, expected, nbytes, full, end, damage)``: the PUTs kept, the buffer
    position after the last record walked, the id expected next, the payload bytes taken, and
    whether the walk stopped at a PUT that did not fit (``pos`` is then at it, ``end == pos`` and
    ``damage`` is ``None``); else ``end`` and ``damage`` are :func:`decode_many`'s.  At a
    compressed unit (a PUTZ) it stops with ``pos`` and ``end`` at it and no damage: the walker
    decodes units (format/compressed.py).
    """
    recs, end, damage = decode_many(buf, base_offset, salt, pos, MAX_BODY, limit=max_items)
    out: list[Put] = []
    append = out.append
    for rec in recs:
        if isinstance(rec, Unit):
            # the walker decompresses a unit itself: stop at it (``pos`` there, no damage)
            return out, pos, expected, nbytes, False, pos, None
        if isinstance(rec, Put) and rec.id >= expected:
            n = len(rec.payload)
            if (out or not first_free) and nbytes + n > max_bytes:
                return out, pos, expected, nbytes, True, pos, None
            append(rec)
            nbytes += n
            expected = rec.id + 1
        pos = rec.offset - base_offset + rec.size
    return out, pos, expected, nbytes, False, end, damage


# ------------------------------------------------------------------------------- decode_columns

_PUT = struct.Struct("<IIBQQQ")
_SWAP = sys.byteorder != "little"
if array("i").itemsize != 4 or array("Q").itemsize != 8:  # pragma: no cover - no such platform here
    raise ImportError("journaled.format.fallback needs 4-byte 'i' and 8-byte 'Q' arrays")


def _le(typecode: str, values: list[int]) -> bytes:
    a = array(typecode, values)
    if _SWAP:  # pragma: no cover - little-endian machines only here
        a.byteswap()
    return a.tobytes()


_NOT_BEFORE = struct.Struct("<Q")
_LENGTHS = struct.Struct("<HHI")  # key_len, header_count, headers_len


def _tag_only(buf: bytes, pos: int) -> bool:
    """The PUTX at ``pos`` (at least PUTX_FIELDS_SIZE bytes of body) carries only a producer's
    tag: no not-before, no key, no headers, so its payload starts at PUTX_OVERHEAD."""
    not_before = _NOT_BEFORE.unpack_from(buf, pos + PUTX_NOT_BEFORE_AT)[0]
    return not_before == 0 and _LENGTHS.unpack_from(buf, pos + PUTX_KEY_LEN_AT) == (0, 0, 0)


def decode_columns(
    buf: bytes,
    base_offset: int,
    salt: int,
    pos: int,
    lo: int,
    hi: int,
    end_offset: int,
    max_rows: int,
    max_bytes: int,
    out: Columns,
) -> tuple[int, int | None, int]:
    """Append the PUT records, and the PUTX records carrying only a producer's tag, from
    ``buf[pos:]`` (``buf`` lies at file offset ``base_offset``) with ids in ``[lo, hi)`` to ``out``
    (columns.py's five buffers, see there); given the thirteen of ``new_columns(meta=True)``, the
    PUTX records whose metadata is consistent, with at most ``metadata.MAX_HEADERS`` headers, too,
    their metadata in the eight others.

    compiled twin: _speedups.c, section decode_columns.

    Records with ids below ``lo`` are walked over without being appended.  Returns ``(pos,
    last_id, status)``: the buffer position after the last record walked, the id of that record
    (``None`` when none was), and why the walk stopped: ``columns.MORE`` (anything but a valid
    record of those -- a PUTX with a key, headers or a not-before among them without the metadata
    columns -- or the end of ``buf``), ``columns.DONE`` (``pos`` is at a valid record with id >=
    ``hi`` or offset >= ``end_offset``) or ``columns.FULL`` (``max_rows`` rows, ``max_bytes``
    payload bytes, or with the metadata columns ``max_bytes`` bytes of keys, names and values,
    checked before each record against the whole of ``out``).
    """
    if not 0 <= max_bytes <= MAX_BATCH_BYTES:
        raise ValueError(f"max_bytes must be in 0..{MAX_BATCH_BYTES}")
    ids_col, add_col, exp_col, off_col, data_col = out[:5]
    with_meta = len(out) == 13
    rows = len(ids_col) // 8
    dlen = len(data_col)
    ids: list[int] = []
    adds: list[int] = []
    exps: list[int] = []
    offs: list[int] = []
    parts: list[bytes] = []
    # the metadata columns: offsets continue from the sizes of their data, header offsets from the
    # count of names so far
    key_offs: list[int] = []
    keys: list[bytes] = []
    not_befores: list[int] = []
    header_offs: list[int] = []
    name_offs: list[int] = []
    names: list[bytes] = []
    value_offs: list[int] = []
    values: list[bytes] = []
    key_end = name_end = value_end = header_end = meta_bytes = 0
    if with_meta:
        key_end, name_end, value_end = len(out[6]), len(out[10]), len(out[12])
        header_end = len(out[9]) // 4 - 1
        meta_bytes = key_end + name_end + value_end
    last_id: int | None = None
    status = MORE
    n = len(buf)
    unpack = _PUT.unpack_from
    view = memoryview(buf)
    try:
        while True:
            if rows >= max_rows or dlen >= max_bytes or meta_bytes >= max_bytes:
                status = FULL
                break
            if pos + PUT_OVERHEAD > n:
                break
            crc, length, rtype, item_id, add_ms, expire_ms = unpack(buf, pos)
            end = pos + RECORD_HEADER_SIZE + length
            meta: Meta | None = None
            if rtype == TYPE_PUT:
                start = pos + PUT_OVERHEAD
                if length < PUT_FIELDS_SIZE:
                    break
            elif rtype == TYPE_PUTX and length >= PUTX_FIELDS_SIZE and end <= n and _tag_only(buf, pos):
                # the tag is the owner's (its retry index); no column holds it
                start = pos + PUTX_OVERHEAD
            elif rtype == TYPE_PUTX and with_meta and length >= PUTX_FIELDS_SIZE and end <= n:
                got = metadata.decode(view, pos + RECORD_HEADER_SIZE + PUT_FIELDS_SIZE, end)
                if isinstance(got, str) or len(got[0].headers) > metadata.MAX_HEADERS:
                    break
                meta, start = got
            else:
                break
            if length > MAX_BODY or end > n:
                break
            offset = base_offset + pos
            if crc32c(view[pos + 4 : end], (salt ^ offset) & 0xFFFFFFFF) != crc:
                break
            if item_id >= hi or offset >= end_offset:
                status = DONE
                break
            last_id = item_id
            if item_id >= lo:
                ids.append(item_id)
                adds.append(add_ms)
                exps.append(expire_ms)
                parts.append(buf[start:end])
                dlen += end - start
                offs.append(dlen)
                rows += 1
                if with_meta:
                    if meta is not None:
                        for name, value in meta.headers.items():
                            raw = name.encode("utf-8")
                            names.append(raw)
                            name_end += len(raw)
                            name_offs.append(name_end)
                            values.append(value)
                            value_end += len(value)
                            value_offs.append(value_end)
                            meta_bytes += len(raw) + len(value)
                        header_end += len(meta.headers)
                        if meta.key is not None:
                            keys.append(meta.key)
                            key_end += len(meta.key)
                            meta_bytes += len(meta.key)
                    key_offs.append(key_end)
                    not_befores.append(0 if meta is None else meta.not_before_ms)
                    header_offs.append(header_end)
            pos = end
    finally:
        view.release()
    ids_col += _le("Q", ids)
    add_col += _le("Q", adds)
    exp_col += _le("Q", exps)
    off_col += _le("i", offs)  # below 2**31: at most max_bytes - 1 + MAX_PAYLOAD
    data_col += b"".join(parts)
    if with_meta:
        out[5] += _le("i", key_offs)  # below 2**31 as the payloads' (max_bytes bounds them too)
        out[6] += b"".join(keys)
        out[7] += _le("Q", not_befores)
        out[8] += _le("i", header_offs)
        out[9] += _le("i", name_offs)
        out[10] += b"".join(names)
        out[11] += _le("i", value_offs)
        out[12] += b"".join(values)
    return pos, last_id, status


# ------------------------------------------------------------------------------- the item twins

#: The fields of journaled.item.Item, in order: what the item references (and the C twins) set.
ITEM_FIELDS = ("id", "data", "add_time", "expire_at", "error_count")

T = TypeVar("T", bound=AttrsInstance)
T_co = TypeVar("T_co", covariant=True)  # the item type a builder returns
ItemT = TypeVar("ItemT")  # the same, in a list (invariant)


class NewItem(Protocol[T_co]):
    """``new_item(id, data, add_time, expire_at=None, error_count=0)``."""

    def __call__(
        self, id: int, data: bytes, add_time: float, expire_at: float | None = None, error_count: int = 0
    ) -> T_co: ...


class NewItems(Protocol[ItemT]):
    """``new_items(first_id, payloads, add_time, expire_at)``."""

    def __call__(
        self, first_id: int, payloads: list[bytes], add_time: float, expire_at: float | None
    ) -> list[ItemT]: ...


class ItemsFromPuts(Protocol[ItemT]):
    """``items_from_puts(recs, errors, want, overhead) -> (items, total, expiring)``."""

    def __call__(
        self, recs: Sequence[Any], errors: Mapping[int, int], want: int, overhead: int
    ) -> tuple[list[ItemT], int, bool]: ...


def _shown(meta: Any) -> bool:
    """``meta`` holds what a reader of the item sees (a key, headers, a not-before), not only a
    producer's tag."""
    return bool(meta.key is not None or meta.headers or meta.not_before_ms)


def item_references(
    item_type: type[T], meta_item: Callable[..., T] | None = None
) -> tuple[NewItem[T], NewItems[T], ItemsFromPuts[T]]:
    """The references ``new_item``, ``new_items`` and ``items_from_puts``, building ``item_type``
    (journaled.item.Item: a frozen attrs class with slots and the fields :data:`ITEM_FIELDS`).
    ``items_from_puts`` builds the item of a PUTX record with ``meta_item(id, data, add_time,
    expire_at, error_count, meta)`` (without it, the metadata is dropped) when the record carries
    something a reader sees: a key, headers or a not-before.  A PUTX carrying only a producer's
    tag (every put a client process makes) gives a plain ``item_type``, as a PUT does: the tag
    serves the owner's exactly-once retry index, which reads records, not items, so a reader has
    no use for it, and the plain item is the small object the compiled twins build.

    Raises ``TypeError`` if ``item_type`` has other fields: the builders set exactly these.
    """
    if tuple(a.name for a in attrs.fields(item_type)) != ITEM_FIELDS:
        raise TypeError(f"{item_type.__name__} has fields other than {ITEM_FIELDS}: update the item twins")
    # perf: attrs' generated __init__ for a frozen slots class sets each field through
    # ``object.__setattr__`` (an attribute lookup per field); calling the slot descriptors
    # directly builds the same object several times faster.  Item has no validators, converters or
    # __attrs_post_init__, so nothing is skipped.
    slots = vars(item_type)
    new = object.__new__
    set_id = slots["id"].__set__
    set_data = slots["data"].__set__
    set_add_time = slots["add_time"].__set__
    set_expire_at = slots["expire_at"].__set__
    set_error_count = slots["error_count"].__set__

    def new_item(
        id: int, data: bytes, add_time: float, expire_at: float | None = None, error_count: int = 0
    ) -> T:
        """``Item(id, data, add_time, expire_at, error_count)``, built faster (hot paths only).

        compiled twin: _speedups.c, section new_items.
        """
        item: T = new(item_type)
        set_id(item, id)
        set_data(item, data)
        set_add_time(item, add_time)
        set_expire_at(item, expire_at)
        set_error_count(item, error_count)
        return item

    def new_items(first_id: int, payloads: list[bytes], add_time: float, expire_at: float | None) -> list[T]:
        """Fresh items ``first_id, first_id + 1, ...`` for ``payloads`` (error count 0).

        compiled twin: _speedups.c, section new_items.
        """
        out: list[T] = []
        append = out.append
        item_id = first_id
        for data in payloads:
            item: T = new(item_type)
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
    ) -> tuple[list[T], int, bool]:
        """Read-behind's items for decoded PUT records (``record.Put``), in order: each charged
        ``len(payload) + overhead``, stopping before the record that would take the total past
        ``want`` (the first always goes); error counts from ``errors``.  Returns the items, their
        total charge, and whether any of them expires.

        compiled twin: _speedups.c, section items_from_puts.
        """
        out: list[T] = []
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
            if meta_item is not None and type(rec) is PutX and _shown(rec.meta):
                out.append(
                    meta_item(
                        rec.id,
                        payload,
                        rec.add_ms / 1000.0,
                        expire_ms / 1000.0 if expire_ms else None,
                        errors.get(rec.id, 0),
                        rec.meta,
                    )
                )
                continue
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

    return new_item, new_items, items_from_puts
