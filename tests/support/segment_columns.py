"""The columnar segment reader the Spark source used before its Arrow path (journaled/spark/
arrowread.py), kept as the tests' reference: plain PUT records decoded inline in Python into
lists, anything else handed over to :func:`journaled.offline.segments.read_segment`.  Tests compare the
Arrow reader with it, row for row and gap for gap."""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator

import attrs
from crc32c import crc32c

from journaled.format.record import RECORD_HEADER_SIZE, TYPE_PUT
from journaled.offline.segments import CHUNK, Gap, Segment, open_segment, read_segment

Columns = tuple[list[int], list[bytes], list[int], list[int]]  # ids, payloads, add ms, expire ms
_PUT = struct.Struct("<IIBQQQ")


def read_segment_columns(seg: Segment, gaps: list[Gap] | None = None, rows: int = 8192) -> Iterator[Columns]:
    """:func:`read_segment` as column lists of at most ``rows`` records: the hot loop of the
    Spark source.  Plain PUT records are decoded inline; anything else (a skippable record type,
    damage, a record longer than a chunk) hands over to :func:`read_segment` from that point."""
    cols: Columns = ([], [], [], [])
    ids, payloads, adds, expires = cols
    opened = open_segment(seg, gaps)
    if opened is None:
        return
    fd, size, pos = opened
    try:
        salt, lo, hi, seg_end = seg.salt, seg.lo, seg.hi, seg.end
        unpack, hsize = _PUT.unpack_from, _PUT.size
        done = False
        last_id: int | None = None
        while not done and pos < size:
            buf = os.pread(fd, min(CHUNK, size - pos), pos)
            view = memoryview(buf)
            n, k = len(buf), 0
            while True:
                offset = pos + k
                if k + hsize > n:
                    break
                crc, length, rtype, item_id, add_ms, expire_ms = unpack(buf, k)
                end = k + RECORD_HEADER_SIZE + length
                if rtype != TYPE_PUT or length < 24 or end > n:
                    break
                if crc32c(view[k + 4 : end], (salt ^ offset) & 0xFFFFFFFF) != crc:
                    break
                # A valid record at or past the end belongs to the next segment; damage there is
                # still ours to report (the next segment's probe would skip it silently).
                if item_id >= hi or offset >= seg_end:
                    done = True
                    break
                last_id = item_id
                if item_id >= lo:
                    ids.append(item_id)
                    payloads.append(buf[k + hsize : end])
                    adds.append(add_ms)
                    expires.append(expire_ms)
                    if len(ids) >= rows:
                        yield cols
                        cols = ([], [], [], [])
                        ids, payloads, adds, expires = cols
                k = end
            view.release()
            if done:
                break
            if k > 0:
                pos += k
                continue
            # no progress inline: let the general reader take it from here
            rest = attrs.evolve(seg, start=pos, exact=True)
            for rec in read_segment(rest, gaps, None if last_id is None else last_id + 1):
                ids.append(rec.id)
                payloads.append(rec.payload)
                adds.append(rec.add_ms)
                expires.append(rec.expire_ms)
                if len(ids) >= rows:
                    yield cols
                    cols = ([], [], [], [])
                    ids, payloads, adds, expires = cols
            break
        if ids:
            yield cols
    finally:
        os.close(fd)
