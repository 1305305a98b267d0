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

Given ``new_columns(meta=True)``, eight more buffers (:data:`META_COLUMNS`) take what a
PUTX carries besides its payload, and every PUTX whose metadata is consistent (metadata.decode
accepts it) with at most ``metadata.MAX_HEADERS`` headers is a row too:

* ``key_offsets``, ``key_data``: each row's key as Arrow binary (int32 end offsets with a leading
  0); a row without a key has an empty one (a stored key is never empty);
* ``not_before``: little-endian u64 per row, 0 = none;
* ``header_offsets``: int32 end index of each row's headers in the header columns (leading 0);
* ``name_offsets``, ``name_data``, ``value_offsets``, ``value_data``: each header's name (UTF-8)
  and value, in stored order, as Arrow string and binary.

Anything else at ``pos`` -- another record type, a PUTX with a key, headers or a not-before
without the metadata columns (or one with more headers, or inconsistent metadata, with them),
damage, a record cut by the end of the buffer -- stops the walk there (status :data:`MORE`), so
the caller reads on (arrowread.py decodes such PUTXs itself) or hands over to the general reader
(log/walker.py), which classifies damage.
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

#: The names of the buffers, in order: the five of a plain batch, then the metadata's.
PLAIN_COLUMNS = ("ids", "add_ms", "expire_ms", "offsets", "data")
META_COLUMNS = (
    "key_offsets",
    "key_data",
    "not_before",
    "header_offsets",
    "name_offsets",
    "name_data",
    "value_offsets",
    "value_data",
)

Columns = list[bytearray]


def new_columns(meta: bool = False) -> Columns:
    """Empty ``[ids, add_ms, expire_ms, offsets, data]`` with the leading 0 offset; with ``meta``,
    followed by the empty :data:`META_COLUMNS` (each offsets column with its leading 0)."""
    cols = [bytearray(), bytearray(), bytearray(), bytearray(4), bytearray()]
    if meta:
        cols += [bytearray(4), bytearray(), bytearray(), bytearray(4), bytearray(4), bytearray()]
        cols += [bytearray(4), bytearray()]
    return cols
