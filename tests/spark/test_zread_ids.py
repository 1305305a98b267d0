"""The Spark source's check that a compressed unit's rows carry the ids its fields promise ([F-45]:
ids ``first_id ..`` in order, exactly ``count`` of them), made on the ids column as one integer
(arrowread._ids_run), says what a row-by-row comparison says, and refuses ids that cannot be
u64s instead of raising."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

pytest.importorskip("pyarrow")

from journaled.spark.arrowread import _ids_run  # noqa: E402

U64_MAX = 2**64 - 1


def column(ids: list[int], prefix: bytes = b"") -> bytearray:
    return bytearray(prefix + struct.pack(f"<{len(ids)}Q", *ids))


def row_by_row(col: bytearray, start: int, first: int, count: int) -> bool:
    rows = col[start:]
    if len(rows) != 8 * count:
        return False
    return list(struct.unpack(f"<{count}Q", rows)) == list(range(first, first + count))


def test_consecutive_ids_from_first_match_and_anything_else_does_not():
    col = column([5, 6, 7, 8], prefix=b"\xff" * 16)
    assert _ids_run(col, 16, 5, 4)
    assert not _ids_run(col, 16, 4, 4)  # another first id
    assert not _ids_run(col, 16, 5, 3)  # a row more than promised
    assert not _ids_run(col, 8, 5, 4)  # the rows from elsewhere
    assert not _ids_run(column([5, 7, 6, 8]), 0, 5, 4)  # same ends, out of order
    assert not _ids_run(column([5, 6, 6, 9]), 0, 5, 4)  # same sum of ids
    assert _ids_run(bytearray(), 0, 123, 0)


def test_ids_past_u64_are_refused_not_raised():
    assert _ids_run(column([U64_MAX]), 0, U64_MAX, 1)
    assert not _ids_run(column([U64_MAX, 0]), 0, U64_MAX, 2)  # a carry is no next id
    assert not _ids_run(column([0]), 0, -1, 1)


@settings(max_examples=300)
@given(
    st.integers(0, U64_MAX),
    st.integers(0, 40),
    st.lists(st.tuples(st.integers(0, 39), st.integers(0, U64_MAX)), max_size=3),
    st.integers(-1, 1),
)
def test_the_check_agrees_with_a_row_by_row_comparison(first, count, edits, extra):
    ids = [(first + i) % 2**64 for i in range(count)]
    for at, value in edits:
        if at < count:
            ids[at] = value
    col = column(ids)
    n = max(0, count + extra)
    assert _ids_run(col, 0, first, n) == (first + n <= 2**64 and row_by_row(col, 0, first, n))
