"""The columnar walk (``decode_columns``) grows its columns by doubling their allocation, also when a
batch is filled by many calls: the Spark source's compressed path appends a unit at a time (about
1000 rows per call, ~30 calls per batch), and each call ends by cutting the columns to what it
wrote.  The compiled twin used to double the *size* on the next call's first row, which missed the
allocation by a little, so bytearray's resize moved the whole column on most calls (0.4 us per
row, four times the rest of the walk).  ``sys.getsizeof`` of a bytearray counts its allocation:
it may change only about once per doubling."""

from __future__ import annotations

import math
import sys

import pytest

from journaled.format import columns, fallback, speedups

try:
    from journaled.format import _speedups as native
except ImportError:  # not built: the reference's growth is Python's own
    native = None  # type: ignore[assignment]
else:  # configured even when JOURNALED_PURE_PYTHON=1 left it unconfigured (idempotent)
    assert speedups.adopt(native) is None

SALT = 0x5EED


def chunk(first_id: int, n: int) -> bytes:
    """``n`` PUTs of 190-byte payloads (a JSON log line's size), ids from ``first_id``."""
    out = bytearray()
    fallback.encode_puts(SALT, 0, first_id, 1_700_000_000_000, 0, [b"j" * 190] * n, out)
    return bytes(out)


@pytest.mark.skipif(native is None, reason="the compiled extension is not built")
@pytest.mark.parametrize("meta", [False, True])
def test_a_batch_filled_call_by_call_moves_each_column_about_once_per_doubling(meta):
    calls, per_call = 40, 1000
    cols = columns.new_columns(meta=meta)
    allocations: list[list[int]] = [[sys.getsizeof(c)] for c in cols]
    for k in range(calls):
        buf = chunk(1 + k * per_call, per_call)
        end, last, status = native.decode_columns(
            buf, 0, SALT, 0, 0, 1 << 62, len(buf) + 1, 1 << 20, columns.MAX_BATCH_BYTES, cols
        )
        assert (end, last, status) == (len(buf), (k + 1) * per_call, columns.MORE)
        for seen, col in zip(allocations, cols, strict=True):
            if sys.getsizeof(col) != seen[-1]:
                seen.append(sys.getsizeof(col))
    assert len(cols[0]) == 8 * calls * per_call and len(cols[4]) == 190 * calls * per_call
    for name, seen, col in zip(("ids", "add_ms", "expire_ms", "offsets", "data"), allocations, cols):
        # from the first call's size to the last: one move per doubling, and a little slack
        doublings = math.log2(len(col) / (len(col) / calls))
        assert len(seen) - 1 <= doublings + 3, (name, len(seen) - 1, seen[:8])
