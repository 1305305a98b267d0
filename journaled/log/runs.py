"""Encoding a run of a batch's items as plain records: what a compressed queue's writer puts in a
unit's inner bytes (docs/format.md section 4.5), or in the file when the unit would not be smaller."""

from __future__ import annotations

from collections.abc import Sequence

from journaled.format import compressed
from journaled.format.metadata import Meta
from journaled.format.record import MAX_UNIT_RAW
from journaled.format.speedups import encode_puts, encode_putx


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
        unit = compressed.encode_unit(salt, pos, first_id, j - i, inner)
        if unit is not None:
            out += unit
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
