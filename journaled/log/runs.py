"""Encoding a run of a batch's items as plain records: what a compressed queue's writer puts in a
unit's inner bytes (docs/format.md section 4.5), or in the file when the unit would not be smaller."""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

from journaled.format import compressed
from journaled.format.metadata import Meta
from journaled.format.record import MAX_UNIT_RAW, PUT_OVERHEAD
from journaled.format.speedups import encode_puts, encode_putx


def run_ends(sizes: Sequence[int]) -> list[int]:
    """``ends[k]``: the bytes the plain records of items ``0 .. k`` take (payload ``sizes[k]``
    each, metadata included), the running sums :func:`cut_run` cuts by."""
    return list(accumulate(size + PUT_OVERHEAD for size in sizes))


def cut_run(ends: Sequence[int], i: int, room: int, empty: bool) -> int:
    """Where the run of a compressed queue's batch starting at item ``i`` ends (exclusive): as
    many items as fit both ``room`` (the bytes left in the current file) and ``MAX_UNIT_RAW``
    ([F-46]), at least one when the file is ``empty`` or it fits the file alone (an item over
    the cap is written plainly, by itself).  ``i`` itself means: no room, rotate first.  ``ends``
    is :func:`run_ends` of the batch (perf: one C-level search per run, not a Python loop per
    item)."""
    base = ends[i - 1] if i else 0
    j = bisect_right(ends, base + min(room, MAX_UNIT_RAW), i)
    if j == i and (empty or ends[i] - base <= room):
        j = i + 1
    return j


def append_run(
    out: bytearray,
    salt: int,
    pos: int,
    first_id: int,
    payloads: Sequence[bytes],
    metas: Sequence[Meta | None] | None,
    encoded: Sequence[bytes] | None,
    i: int,
    j: int,
    raw: int,
    add_ms: int,
    expire_ms: int,
) -> None:
    """Append to ``out`` (a file's bytes, ``pos`` being where they end) items ``i .. j-1``, whose
    plain records take ``raw`` bytes: as one PUTZ record when that is smaller (two items or more,
    at most ``MAX_UNIT_RAW`` of them), else as the plain records (:func:`encode_run`)."""
    if j - i > 1 and raw <= MAX_UNIT_RAW:
        inner = bytearray()
        encode_run(
            inner,
            compressed.unit_salt(salt, pos),
            0,
            first_id,
            payloads,
            metas,
            encoded,
            i,
            j,
            add_ms,
            expire_ms,
        )
        if compressed.append_unit(out, salt, pos, first_id, j - i, inner):
            return
    encode_run(out, salt, pos, first_id, payloads, metas, encoded, i, j, add_ms, expire_ms)


def encode_run(
    out: bytearray,
    salt: int,
    pos: int,
    first_id: int,
    payloads: Sequence[bytes],
    metas: Sequence[Meta | None] | None,
    encoded: Sequence[bytes] | None,
    i: int,
    j: int,
    add_ms: int,
    expire_ms: int,
) -> None:
    """Append to ``out`` the records of items ``i .. j-1`` (ids from ``first_id``), the first at
    offset ``pos`` of a file (or of a unit's inner bytes) with ``salt``: PUTs, or with ``metas``
    a PUTX for each item that has metadata (``encoded[k]``: ``metadata.encode(metas[k])``)."""
    if metas is None or encoded is None:
        encode_puts(salt, pos, first_id, add_ms, expire_ms, payloads[i:j], out)
        return
    start = len(out) - pos  # out[start] is offset 0
    item_id = first_id
    for k in range(i, j):
        at = len(out) - start
        meta = metas[k]
        if meta is None:
            encode_puts(salt, at, item_id, add_ms, expire_ms, (payloads[k],), out)
        else:
            encode_putx(salt, at, item_id, add_ms, expire_ms, encoded[k], payloads[k], out)
        item_id += 1
