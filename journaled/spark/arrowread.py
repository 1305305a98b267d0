"""Read one segment of a journal file straight into Arrow arrays: the Spark source's hot loop.

Records are decoded by ``journaled.format.speedups.decode_columns`` (compiled, or format/fallback.py's
pure-Python reference) into the byte buffers of ``columns.new_columns(meta=True)`` per batch -- ids,
add and expire times, payload offsets and bytes, and each row's key, not-before and headers -- which
become Arrow arrays with ``pyarrow.Array.from_buffers``: no Python object per record, whether it is
a PUT or a PUTX with a key, headers or a not-before.  A compressed unit (docs/format.md 4.5) is
decompressed here and its inner records go through the same columnar walk.  The rare PUTX the
columnar walk leaves (more headers than a put writes, ``metadata.MAX_HEADERS``) is decoded here, in
Python, its row appended to the same buffers, and the walk goes on after it.  Anything else it does
not decode inline (a skippable record type, damage, a record longer than a read) hands over, from
that point, to :func:`journaled.offline.segments.read_segment` and the record walker
(log/walker.py), which skips damage and notes it in ``gaps``, exactly as before.
"""

from __future__ import annotations

import os
import struct
import sys
from array import array
from collections.abc import Iterator

import attrs
import pyarrow as pa

from journaled.errors import UnsupportedVersion
from journaled.format import compressed
from journaled.format.columns import DONE, FULL, MAX_BATCH_BYTES, Columns, new_columns
from journaled.format.record import (
    MAX_BODY,
    PUTX_FIELDS_SIZE,
    RECORD_HEADER_SIZE,
    TYPE_PUTX,
    TYPE_PUTZ,
    Put,
    PutX,
    Unit,
    decode_one,
)
from journaled.format.speedups import decode_columns
from journaled.offline.segments import Gap, Segment, open_segment, read_segment

#: Bytes read per ``pread``.
CHUNK = 4 << 20
#: Payload bytes per Arrow batch (at most; a batch holds at least one record).
BATCH_BYTES = 64 << 20

_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")


#: Kafka's ``headers`` column: ``array<struct<key: string, value: binary>>``.
HEADER_FIELDS = [pa.field("key", pa.string()), pa.field("value", pa.binary())]
HEADERS_TYPE = pa.list_(pa.struct(HEADER_FIELDS))


@attrs.frozen
class ArrowColumns:
    """One batch: ``ids``/``add_ms``/``expire_ms`` as int64, ``values`` as binary, and the
    buffers of the metadata columns (columns.META_COLUMNS), built into Arrow arrays on demand by
    :meth:`keys`, :meth:`not_before_ms` and :meth:`headers`: rows without one are null there."""

    ids: pa.Array
    values: pa.Array
    add_ms: pa.Array
    expire_ms: pa.Array
    meta: Columns = attrs.field(factory=list, repr=False)

    def __len__(self) -> int:
        return len(self.ids)

    def keys(self) -> pa.Array:
        """The ``key`` column: each row's key, null when it has none (a stored key is never
        empty, so an empty one in the buffers is a row without)."""
        n = len(self)
        if not self.meta or not self.meta[1]:
            return pa.nulls(n, pa.binary())
        import pyarrow.compute as pc  # here: a read without this column never imports it (~0.1 s)

        offsets, data = pa.py_buffer(self.meta[0]), pa.py_buffer(self.meta[1])
        bare = pa.Array.from_buffers(pa.binary(), n, [None, offsets, data])
        valid = pc.greater(pc.binary_length(bare), 0)
        return pa.Array.from_buffers(pa.binary(), n, [_bitmap(valid), offsets, data])

    def not_before_ms(self) -> pa.Array:
        """Each row's not-before time in epoch ms (int64), null when it has none."""
        n = len(self)
        if not self.meta or self.meta[2].count(0) == len(self.meta[2]):  # no row has one
            return pa.nulls(n, pa.int64())
        import pyarrow.compute as pc

        raw = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(self.meta[2])])
        return pc.if_else(pc.equal(raw, 0), pa.scalar(None, pa.int64()), raw)

    def headers(self) -> pa.Array:
        """The ``headers`` column: each row's headers in the order they were put, null when it
        has none (as Kafka's source gives them)."""
        n = len(self)
        if not self.meta or len(self.meta[4]) <= 4:
            return pa.nulls(n, HEADERS_TYPE)
        import pyarrow.compute as pc

        _, _, _, row_offs, name_offs, names, value_offs, values = self.meta
        count = len(name_offs) // 4 - 1
        struct_arr = pa.StructArray.from_arrays(
            [
                pa.Array.from_buffers(
                    pa.string(), count, [None, pa.py_buffer(name_offs), pa.py_buffer(names)]
                ),
                pa.Array.from_buffers(
                    pa.binary(), count, [None, pa.py_buffer(value_offs), pa.py_buffer(values)]
                ),
            ],
            fields=HEADER_FIELDS,
        )
        offsets = pa.py_buffer(row_offs)
        bare = pa.Array.from_buffers(HEADERS_TYPE, n, [None, offsets], children=[struct_arr])
        valid = pc.greater(pc.list_value_length(bare), 0)
        return pa.Array.from_buffers(HEADERS_TYPE, n, [_bitmap(valid), offsets], children=[struct_arr])


def _bitmap(valid: pa.Array) -> pa.Buffer:
    """The validity bitmap of a boolean array without nulls: its values buffer (offset 0)."""
    buf: pa.Buffer = valid.buffers()[1]
    return buf


def to_arrow(cols: Columns) -> ArrowColumns:
    """Wrap the buffers of :func:`journaled.format.columns.new_columns` (no copy)."""
    ids, adds, exps, offs, data = cols[:5]
    n = len(ids) // 8
    i64 = pa.int64()
    return ArrowColumns(
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(ids)]),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)]),
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(adds)]),
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(exps)]),
        cols[5:],
    )


def read_segment_arrays(
    seg: Segment,
    gaps: list[Gap] | None = None,
    rows: int = 32768,
    max_bytes: int = BATCH_BYTES,
    chunk: int = CHUNK,
) -> Iterator[ArrowColumns]:
    """The records of ``seg`` with ids in ``[seg.lo, seg.hi)``, in batches of at most ``rows``
    records and about ``max_bytes`` payload bytes (damage skipped and noted in ``gaps``), read
    ``chunk`` bytes at a time (any size reads the same records)."""
    opened = open_segment(seg, gaps)
    if opened is None:
        return
    fd, size, pos = opened
    cols = new_columns(meta=True)
    try:
        salt, lo, hi, seg_end = seg.salt, seg.lo, seg.hi, seg.end
        last_id: int | None = None
        status = 0
        while pos < size:
            buf = os.pread(fd, min(chunk, size - pos), pos)
            k = 0
            while True:
                k, last, status = decode_columns(buf, pos, salt, k, lo, hi, seg_end, rows, max_bytes, cols)
                if last is not None:
                    last_id = last
                if status == FULL:
                    yield to_arrow(cols)
                    cols = new_columns(meta=True)
                    continue
                if status == DONE:
                    break
                unit = _unit_at(buf, k, pos, salt)
                if unit is not None:
                    inner, raw = unit
                    if inner.first_id >= hi or inner.offset >= seg_end:
                        status = DONE
                        break
                    # the unit's inner records, decoded by the same columnar walk ([F-43]):
                    # straight into this batch when the whole unit fits it, else after a check
                    direct = _unit_direct(inner, raw, salt, lo, hi, rows, max_bytes, cols)
                    if direct is not None:
                        last_id = direct
                        if len(cols[0]) // 8 >= rows or len(cols[4]) >= max_bytes:
                            yield to_arrow(cols)
                            cols = new_columns(meta=True)
                        k += inner.size
                        continue
                    if _unit_checked(inner, raw, salt):
                        ik, inner_salt = 0, compressed.unit_salt(salt, inner.offset)
                        while True:
                            ik, last, status = decode_columns(
                                raw, 0, inner_salt, ik, lo, hi, len(raw) + 1, rows, max_bytes, cols
                            )
                            if last is not None:
                                last_id = last
                            if status != FULL:
                                break
                            yield to_arrow(cols)
                            cols = new_columns(meta=True)
                        if status == DONE:
                            break
                        k += inner.size
                        continue
                rec = _putx_at(buf, k, pos, salt)
                if rec is None:
                    break
                if rec.id >= hi or rec.offset >= seg_end:
                    status = DONE
                    break
                last_id = rec.id
                if rec.id >= lo:
                    if len(cols[0]) // 8 >= rows or len(cols[4]) >= max_bytes:
                        yield to_arrow(cols)
                        cols = new_columns(meta=True)
                    _append(cols, rec)
                k += rec.size
            if status == DONE:
                break
            if k > 0:
                pos += k
                continue
            # nothing decoded inline here: the general reader takes it from this point
            rest = attrs.evolve(seg, start=pos, exact=True)
            for got in read_segment(rest, gaps, None if last_id is None else last_id + 1, chunk):
                _append(cols, got)
                if len(cols[0]) // 8 >= rows or len(cols[4]) >= max_bytes:
                    yield to_arrow(cols)
                    cols = new_columns(meta=True)
            break
        if cols[0]:
            yield to_arrow(cols)
    finally:
        os.close(fd)


def _unit_at(buf: bytes, k: int, base: int, salt: int) -> tuple[Unit, bytes] | None:
    """The valid compressed unit wholly inside ``buf`` at ``k`` and its inner bytes (not checked
    yet: :func:`_unit_direct`, :func:`_unit_checked`); None for anything else, which the record
    walker then takes (damage, a codec or binding missing: it reports or raises)."""
    if k + RECORD_HEADER_SIZE > len(buf) or buf[k + RECORD_HEADER_SIZE - 1] != TYPE_PUTZ:
        return None
    length = int.from_bytes(buf[k + 4 : k + 8], "little")
    if length > MAX_BODY or k + RECORD_HEADER_SIZE + length > len(buf) or not compressed.available():
        return None
    try:
        unit = decode_one(buf, k, base, salt)
    except UnsupportedVersion:
        return None
    if not isinstance(unit, Unit):
        return None
    raw = compressed.inflate(unit)
    return None if isinstance(raw, str) else (unit, raw)


def _ids_run(col: bytearray, start: int, first: int, count: int) -> bool:
    """The ids column ``col`` holds, from byte ``start`` to its end, exactly ``count`` rows with ids
    ``first ..`` in order (little-endian u64s, as columns.py lays them out).

    perf: compared as one integer, without an int per row.  Read little-endian, the column is
    ``sum(id_i << 64 * i)``, and ids ``first + i`` make ``first * ONES + RAMP`` (``ONES`` has a 1 in
    each 64-bit limb, ``RAMP`` the limb's index); no limb carries into the next while every id fits
    64 bits, so equal integers mean equal rows."""
    if first < 0 or count < 0 or first + count > 1 << 64 or len(col) - start != 8 * count:
        return False
    ones, ramp = _limbs(count)
    return int.from_bytes(memoryview(col)[start:], "little") == first * ones + ramp


_LIMBS: dict[int, tuple[int, int]] = {}


def _limbs(count: int) -> tuple[int, int]:
    """``ONES`` and ``RAMP`` of :func:`_ids_run` for ``count`` rows (a few unit sizes recur)."""
    got = _LIMBS.get(count)
    if got is None:
        ramp = array("Q", range(count))
        if sys.byteorder != "little":  # pragma: no cover - little-endian machines only here
            ramp.byteswap()
        got = (
            int.from_bytes(b"\x01\0\0\0\0\0\0\0" * count, "little"),
            int.from_bytes(ramp.tobytes(), "little"),
        )
        if len(_LIMBS) >= 64:
            _LIMBS.clear()
        _LIMBS[count] = got
    return got


def _unit_direct(
    unit: Unit, raw: bytes, salt: int, lo: int, hi: int, rows: int, max_bytes: int, cols: Columns
) -> int | None:
    """Append every item of ``unit`` to ``cols`` when all of them belong to ``[lo, hi)`` and fit
    the batch, and the inner bytes are what the record walker accepts (exactly ``count`` records,
    ids in order, each decoded); return the last id.  Otherwise ``cols`` is left as it was and
    None returned."""
    n = len(cols[0]) // 8
    if unit.first_id < lo or unit.last_id >= hi or n + unit.count > rows:
        return None
    if (
        len(cols[4]) + len(raw) > max_bytes
        or len(cols[6]) + len(cols[10]) + len(cols[12]) + len(raw) > max_bytes
    ):
        return None
    marks = [len(b) for b in cols]
    end, last, _ = decode_columns(
        raw, 0, compressed.unit_salt(salt, unit.offset), 0, lo, hi, len(raw) + 1, rows, max_bytes, cols
    )
    if end == len(raw) and last == unit.last_id and _ids_run(cols[0], marks[0], unit.first_id, unit.count):
        return last
    for b, m in zip(cols, marks, strict=True):
        del b[m:]
    return None


def _unit_checked(unit: Unit, raw: bytes, salt: int) -> bool:
    """The inner bytes are what the record walker accepts, checked by one columnar walk into
    scratch buffers (C speed, no object per record)."""
    scratch = new_columns(meta=True)
    end, _, status = decode_columns(
        raw, 0, compressed.unit_salt(salt, unit.offset), 0, 0, 1 << 62, len(raw) + 1,
        unit.count + 1, MAX_BATCH_BYTES, scratch,
    )  # fmt: skip
    return status != FULL and end == len(raw) and _ids_run(scratch[0], 0, unit.first_id, unit.count)


def _putx_at(buf: bytes, k: int, base: int, salt: int) -> PutX | None:
    """The valid PUTX record wholly inside ``buf`` at ``k`` (None for anything else: another
    type, damage, a record cut by the end of the read)."""
    if k + RECORD_HEADER_SIZE > len(buf) or buf[k + RECORD_HEADER_SIZE - 1] != TYPE_PUTX:
        return None
    length = int.from_bytes(buf[k + 4 : k + 8], "little")
    if length < PUTX_FIELDS_SIZE or length > MAX_BODY or k + RECORD_HEADER_SIZE + length > len(buf):
        return None
    rec = decode_one(buf, k, base, salt)
    return rec if isinstance(rec, PutX) else None


def _append(cols: Columns, rec: Put) -> None:
    """One row for ``rec`` (a PUT, or a PUTX with its metadata) in the buffers of
    ``new_columns(meta=True)``, as ``decode_columns`` appends it."""
    (
        ids,
        adds,
        exps,
        offs,
        data,
        key_offs,
        keys,
        not_before,
        row_offs,
        name_offs,
        names,
        value_offs,
        values,
    ) = cols
    ids += _U64.pack(rec.id)
    adds += _U64.pack(rec.add_ms)
    exps += _U64.pack(rec.expire_ms)
    data += rec.payload
    offs += _I32.pack(len(data))
    meta = rec.meta if isinstance(rec, PutX) else None
    if meta is not None:
        for name, value in meta.headers.items():
            names += name.encode("utf-8")
            name_offs += _I32.pack(len(names))
            values += value
            value_offs += _I32.pack(len(values))
        keys += meta.key or b""
    key_offs += _I32.pack(len(keys))
    not_before += _U64.pack(0 if meta is None else meta.not_before_ms)
    row_offs += _I32.pack(len(name_offs) // 4 - 1)
