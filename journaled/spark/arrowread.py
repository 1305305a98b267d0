"""Read one segment of a journal file straight into Arrow arrays: the Spark source's hot loop.

Records are decoded by ``journaled.format.speedups.decode_columns`` (compiled, or format/fallback.py's
pure-Python reference) into five byte buffers per batch -- ids, add and expire times, payload
offsets and payload bytes -- which become Arrow arrays with ``pyarrow.Array.from_buffers``:
no Python object per record.  ``decode_columns`` takes plain PUTs and PUTXs carrying only a
producer's tag (every put of a client process: the tag is the owner's, no column holds it); a
PUTX with more (a key, headers or a not-before time) where it stops is decoded here, in Python,
its row appended to the same buffers and its metadata kept beside them (``ArrowColumns.metas``),
and the columnar walk goes on after it.  Anything else it does not decode inline (a skippable record
type, damage, a record longer than a read) hands over, from that point, to
:func:`journaled.offline.segments.read_segment` and the record walker (log/walker.py), which skips damage
and notes it in ``gaps``, exactly as before.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import attrs
import pyarrow as pa

from journaled.format.columns import DONE, FULL, Columns, new_columns
from journaled.format.metadata import Meta
from journaled.format.record import (
    MAX_BODY,
    PUTX_FIELDS_SIZE,
    RECORD_HEADER_SIZE,
    TYPE_PUTX,
    PutX,
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
HEADERS_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


@attrs.frozen
class ArrowColumns:
    """One batch: ``ids``/``add_ms``/``expire_ms`` as int64, ``values`` as binary, and the
    metadata of its rows that carry some a reader sees (PUTX records with a key, headers or a
    not-before): ``(row, meta)`` in row order.  Other rows are null in the metadata columns."""

    ids: pa.Array
    values: pa.Array
    add_ms: pa.Array
    expire_ms: pa.Array
    metas: tuple[tuple[int, Meta], ...] = ()

    def __len__(self) -> int:
        return len(self.ids)

    def keys(self) -> pa.Array:
        """The ``key`` column: each row's key, null when it has none."""
        if not self.metas:
            return pa.nulls(len(self), pa.binary())
        out: list[bytes | None] = [None] * len(self)
        for row, meta in self.metas:
            out[row] = meta.key
        return pa.array(out, pa.binary())

    def not_before_ms(self) -> pa.Array:
        """Each row's not-before time in epoch ms (int64), null when it has none."""
        if not self.metas:
            return pa.nulls(len(self), pa.int64())
        out: list[int | None] = [None] * len(self)
        for row, meta in self.metas:
            out[row] = meta.not_before_ms or None
        return pa.array(out, pa.int64())

    def headers(self) -> pa.Array:
        """The ``headers`` column: each row's headers in the order they were put, null when it
        has none (as Kafka's source gives them)."""
        if not self.metas:
            return pa.nulls(len(self), HEADERS_TYPE)
        out: list[list[dict[str, object]] | None] = [None] * len(self)
        for row, meta in self.metas:
            if meta.headers:
                out[row] = [{"key": k, "value": v} for k, v in meta.headers.items()]
        return pa.array(out, HEADERS_TYPE)


def to_arrow(cols: Columns, metas: list[tuple[int, Meta]] | None = None) -> ArrowColumns:
    """Wrap the buffers of :func:`journaled.format.columns.new_columns` (no copy)."""
    ids, adds, exps, offs, data = cols
    n = len(ids) // 8
    i64 = pa.int64()
    return ArrowColumns(
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(ids)]),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)]),
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(adds)]),
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(exps)]),
        tuple(metas or ()),
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
    cols = new_columns()
    metas: list[tuple[int, Meta]] = []
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
                    yield to_arrow(cols, metas)
                    cols, metas = new_columns(), []
                    continue
                if status == DONE:
                    break
                rec = _putx_at(buf, k, pos, salt)
                if rec is None:
                    break
                if rec.id >= hi or rec.offset >= seg_end:
                    status = DONE
                    break
                last_id = rec.id
                if rec.id >= lo:
                    if len(cols[0]) // 8 >= rows or len(cols[4]) >= max_bytes:
                        yield to_arrow(cols, metas)
                        cols, metas = new_columns(), []
                    if _shown(rec.meta):
                        metas.append((len(cols[0]) // 8, rec.meta))
                    _append(cols, rec.id, rec.add_ms, rec.expire_ms, rec.payload)
                k += rec.size
            if status == DONE:
                break
            if k > 0:
                pos += k
                continue
            # nothing decoded inline here: the general reader takes it from this point
            rest = attrs.evolve(seg, start=pos, exact=True)
            for got in read_segment(rest, gaps, None if last_id is None else last_id + 1, chunk):
                if isinstance(got, PutX) and _shown(got.meta):
                    metas.append((len(cols[0]) // 8, got.meta))
                _append(cols, got.id, got.add_ms, got.expire_ms, got.payload)
                if len(cols[0]) // 8 >= rows or len(cols[4]) >= max_bytes:
                    yield to_arrow(cols, metas)
                    cols, metas = new_columns(), []
            break
        if cols[0]:
            yield to_arrow(cols, metas)
    finally:
        os.close(fd)


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


def _shown(meta: Meta) -> bool:
    """``meta`` has a column to fill: a key, headers or a not-before (a producer's tag has none)."""
    return bool(meta.key is not None or meta.headers or meta.not_before_ms)


def _append(cols: Columns, item_id: int, add_ms: int, expire_ms: int, payload: bytes) -> None:
    ids, adds, exps, offs, data = cols
    ids += _U64.pack(item_id)
    adds += _U64.pack(add_ms)
    exps += _U64.pack(expire_ms)
    data += payload
    offs += _I32.pack(len(data))
