"""Read one segment of a journal file straight into Arrow arrays: the Spark source's hot loop.

Records are decoded by ``journaled.format.speedups.decode_columns`` (compiled, or format/fallback.py's
pure-Python reference) into five byte buffers per batch -- ids, add and expire times, payload
offsets and payload bytes -- which become Arrow arrays with ``pyarrow.Array.from_buffers``:
no Python object per record.  Anything the columnar walk does not decode inline (a skippable
record type, damage, a record longer than a read) hands over, from that point, to
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
from journaled.format.speedups import decode_columns
from journaled.offline.segments import Gap, Segment, open_segment, read_segment

#: Bytes read per ``pread``.
CHUNK = 4 << 20
#: Payload bytes per Arrow batch (at most; a batch holds at least one record).
BATCH_BYTES = 64 << 20

_U64 = struct.Struct("<Q")
_I32 = struct.Struct("<i")


@attrs.frozen
class ArrowColumns:
    """One batch: ``ids``/``add_ms``/``expire_ms`` as int64, ``values`` as binary."""

    ids: pa.Array
    values: pa.Array
    add_ms: pa.Array
    expire_ms: pa.Array

    def __len__(self) -> int:
        return len(self.ids)


def to_arrow(cols: Columns) -> ArrowColumns:
    """Wrap the buffers of :func:`journaled.format.columns.new_columns` (no copy)."""
    ids, adds, exps, offs, data = cols
    n = len(ids) // 8
    i64 = pa.int64()
    return ArrowColumns(
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(ids)]),
        pa.Array.from_buffers(pa.binary(), n, [None, pa.py_buffer(offs), pa.py_buffer(data)]),
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(adds)]),
        pa.Array.from_buffers(i64, n, [None, pa.py_buffer(exps)]),
    )


def read_segment_arrays(
    seg: Segment, gaps: list[Gap] | None = None, rows: int = 32768, max_bytes: int = BATCH_BYTES
) -> Iterator[ArrowColumns]:
    """The records of ``seg`` with ids in ``[seg.lo, seg.hi)``, in batches of at most ``rows``
    records and about ``max_bytes`` payload bytes (damage skipped and noted in ``gaps``)."""
    opened = open_segment(seg, gaps)
    if opened is None:
        return
    fd, size, pos = opened
    cols = new_columns()
    try:
        salt, lo, hi, seg_end = seg.salt, seg.lo, seg.hi, seg.end
        last_id: int | None = None
        status = 0
        while pos < size:
            buf = os.pread(fd, min(CHUNK, size - pos), pos)
            k = 0
            while True:
                k, last, status = decode_columns(buf, pos, salt, k, lo, hi, seg_end, rows, max_bytes, cols)
                if last is not None:
                    last_id = last
                if status != FULL:
                    break
                yield to_arrow(cols)
                cols = new_columns()
            if status == DONE:
                break
            if k > 0:
                pos += k
                continue
            # nothing decoded inline here: the general reader takes it from this point
            rest = attrs.evolve(seg, start=pos, exact=True)
            for rec in read_segment(rest, gaps, None if last_id is None else last_id + 1):
                _append(cols, rec.id, rec.add_ms, rec.expire_ms, rec.payload)
                if len(cols[0]) // 8 >= rows or len(cols[4]) >= max_bytes:
                    yield to_arrow(cols)
                    cols = new_columns()
            break
        if cols[0]:
            yield to_arrow(cols)
    finally:
        os.close(fd)


def _append(cols: Columns, item_id: int, add_ms: int, expire_ms: int, payload: bytes) -> None:
    ids, adds, exps, offs, data = cols
    ids += _U64.pack(item_id)
    adds += _U64.pack(add_ms)
    exps += _U64.pack(expire_ms)
    data += payload
    offs += _I32.pack(len(data))
