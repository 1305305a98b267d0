"""Columnar decoding of PUT records: the reference (and fallback) of the compiled twin.

:func:`decode_columns` walks well-formed PUT records in a buffer -- the same records the
record walker's fast path accepts: type PUT, a plausible length, all bytes present, the
position-seeded CRC32C matching -- and appends their fields to five column buffers instead of
building one object per record.  The buffers are what Arrow takes as they are (the Spark
source wraps them with ``pyarrow.Array.from_buffers``, see journaled/spark/arrowread.py):

* ``ids``, ``add_ms``, ``expire_ms``: little-endian unsigned 64-bit integers, one per row;
* ``offsets``: little-endian signed 32-bit end offsets of each payload in ``data`` (the caller
  seeds it with a leading 0, as Arrow's binary layout wants);
* ``data``: the payloads back to back.

Anything else at ``pos`` -- another record type, damage, a record cut by the end of the buffer
-- stops the walk there (status :data:`MORE`), so the caller reads on or hands over to the
general reader (log/walker.py), which classifies damage.  ``journaled.format._speedups.decode_columns``
is the compiled twin (selected by journaled.format.speedups); both return the same values and append
the same bytes, which tests/format/test_speedups.py checks with hypothesis on random and damaged
buffers.
"""

from __future__ import annotations

import struct
import sys
from array import array

from crc32c import crc32c

from journaled.format.record import MAX_BODY, PUT_OVERHEAD, RECORD_HEADER_SIZE, TYPE_PUT

#: The walk stopped at something it does not decode inline, or at the end of the buffer.
MORE = 0
#: A valid record at or past the range's end (id >= ``hi`` or offset >= ``end_offset``).
DONE = 1
#: ``max_rows`` rows or ``max_bytes`` payload bytes are in the columns.
FULL = 2

#: Largest ``max_bytes``: a batch's payloads plus one more record stay below 2**31 (int32 offsets).
MAX_BATCH_BYTES = 1 << 30

_PUT = struct.Struct("<IIBQQQ")
_SWAP = sys.byteorder != "little"
if array("i").itemsize != 4 or array("Q").itemsize != 8:  # pragma: no cover - no such platform here
    raise ImportError("journaled.format.columns needs 4-byte 'i' and 8-byte 'Q' arrays")

Columns = list[bytearray]


def new_columns() -> Columns:
    """Empty ``[ids, add_ms, expire_ms, offsets, data]`` with the leading 0 offset."""
    return [bytearray(), bytearray(), bytearray(), bytearray(4), bytearray()]


def _le(typecode: str, values: list[int]) -> bytes:
    a = array(typecode, values)
    if _SWAP:  # pragma: no cover - little-endian machines only here
        a.byteswap()
    return a.tobytes()


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
    """Append the PUT records from ``buf[pos:]`` (``buf`` lies at file offset ``base_offset``)
    with ids in ``[lo, hi)`` to ``out`` (see the module docstring).

    Records with ids below ``lo`` are walked over without being appended.  Returns ``(pos,
    last_id, status)``: the buffer position after the last record walked, the id of that record
    (``None`` when none was), and why the walk stopped: :data:`MORE`, :data:`DONE` (``pos`` is at
    that record) or :data:`FULL` (checked before each record, against the whole of ``out``).
    """
    if not 0 <= max_bytes <= MAX_BATCH_BYTES:
        raise ValueError(f"max_bytes must be in 0..{MAX_BATCH_BYTES}")
    ids_col, add_col, exp_col, off_col, data_col = out
    rows = len(ids_col) // 8
    dlen = len(data_col)
    ids: list[int] = []
    adds: list[int] = []
    exps: list[int] = []
    offs: list[int] = []
    parts: list[bytes] = []
    last_id: int | None = None
    status = MORE
    n = len(buf)
    unpack = _PUT.unpack_from
    view = memoryview(buf)
    try:
        while True:
            if rows >= max_rows or dlen >= max_bytes:
                status = FULL
                break
            if pos + PUT_OVERHEAD > n:
                break
            crc, length, rtype, item_id, add_ms, expire_ms = unpack(buf, pos)
            end = pos + RECORD_HEADER_SIZE + length
            if rtype != TYPE_PUT or length < 24 or length > MAX_BODY or end > n:
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
                parts.append(buf[pos + PUT_OVERHEAD : end])
                dlen += end - pos - PUT_OVERHEAD
                offs.append(dlen)
                rows += 1
            pos = end
    finally:
        view.release()
    ids_col += _le("Q", ids)
    add_col += _le("Q", adds)
    exp_col += _le("Q", exps)
    off_col += _le("i", offs)  # below 2**31: at most max_bytes - 1 + MAX_PAYLOAD
    data_col += b"".join(parts)
    return pos, last_id, status
