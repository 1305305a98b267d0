"""The columnar layout of PUT records: what ``decode_columns`` fills, for Arrow.

``decode_columns`` (journaled.format.speedups selects the compiled twin or format/fallback.py's
reference) walks well-formed PUT records in a buffer -- the same records the record walker's fast
path accepts: type PUT, a plausible length, all bytes present, the position-seeded CRC32C matching
-- and appends their fields to five column buffers instead of building one object per record.
A PUTX record carrying only a producer's tag (no not-before, key or headers: every put a client
process makes) is such a row too, its payload taken from after its metadata; no column holds the
tag, which serves the owner's exactly-once retry index, not readers.
The buffers are what Arrow takes as they are (the Spark source wraps them with
``pyarrow.Array.from_buffers``, see journaled/spark/arrowread.py):

* ``ids``, ``add_ms``, ``expire_ms``: little-endian unsigned 64-bit integers, one per row;
* ``offsets``: little-endian signed 32-bit end offsets of each payload in ``data`` (the caller
  seeds it with a leading 0, as Arrow's binary layout wants);
* ``data``: the payloads back to back.

Anything else at ``pos`` -- another record type, a PUTX with a key, headers or a not-before,
damage, a record cut by the end of the buffer -- stops the walk there (status :data:`MORE`), so
the caller reads on (arrowread.py decodes the other PUTXs itself) or hands over to the general
reader (log/walker.py), which classifies damage.
"""

from __future__ import annotations

#: The walk stopped at something it does not decode inline, or at the end of the buffer.
MORE = 0
#: A valid record at or past the range's end (id >= ``hi`` or offset >= ``end_offset``).
DONE = 1
#: ``max_rows`` rows or ``max_bytes`` payload bytes are in the columns.
FULL = 2

#: Largest ``max_bytes``: a batch's payloads plus one more record stay below 2**31 (int32 offsets).
MAX_BATCH_BYTES = 1 << 30

Columns = list[bytearray]


def new_columns() -> Columns:
    """Empty ``[ids, add_ms, expire_ms, offsets, data]`` with the leading 0 offset."""
    return [bytearray(), bytearray(), bytearray(), bytearray(4), bytearray()]
