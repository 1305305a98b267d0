"""Journal images whose records start with zero bytes: the records a window-cut bug loses.

A record starts with its CRC (little-endian), so one record in 256 starts with a zero byte, one in
65,536 with two.  A reader that takes "the few bytes left in my window are zeros" for a zero-filled
tail skips such a record whenever a read window ends 1 to 8 bytes into it (issue 34, point 1).
These helpers search, for each record, the few payload bytes that make its CRC start with zeros,
so that every window end can meet one.
"""

from __future__ import annotations

import os
import random

from journaled.disk.layout import journal_path
from journaled.format.metadata import Meta
from journaled.format.record import FileHeader, encode_header, encode_put, encode_putx

SALT = 0x5EED


def zero_led(
    salt: int, offset: int, item_id: int, payload: bytes, zeros: int, meta: Meta | None = None
) -> bytes:
    """A valid PUT (or PUTX with ``meta``) at ``offset`` whose first ``zeros`` bytes are 0x00:
    ``payload`` gets a 4-byte counter appended, the first counter that gives such a CRC."""
    for n in range(1 << 32):
        body = payload + n.to_bytes(4, "little")
        if meta is None:
            rec = encode_put(salt, offset, item_id, 1_700_000_000_000 + item_id, 0, body)
        else:
            rec = encode_putx(salt, offset, item_id, 1_700_000_000_000 + item_id, 0, meta, body)
        if not any(rec[:zeros]):
            return rec
    raise AssertionError("unreachable: some counter always works")  # pragma: no cover


def records(
    salt: int, base: int, first_id: int, count: int, seed: int, size: int | None = None
) -> tuple[bytes, list[tuple[int, int]]]:
    """``count`` valid records from file offset ``base``, ids from ``first_id``: of random sizes
    (or every one ``size`` bytes long), a third of them PUTX (a key, a header), every one starting
    with at least one zero byte and one in forty with two (each of those costs 65,536 CRCs on
    average to find).  Returns the bytes and each record's ``(id, offset)``."""
    rng = random.Random(seed)
    out = bytearray()
    where = []
    for k in range(count):
        item_id = first_id + k
        meta = Meta(key=b"k%d" % (k % 5), headers={"h": b"v"}) if rng.random() < 1 / 3 else None
        if size is None:
            length = rng.randrange(0, 90)
        else:  # the payload that makes the whole record `size` bytes (with the 4-byte counter)
            if meta is None:
                empty = encode_put(salt, 0, 0, 0, 0, b"")
            else:
                empty = encode_putx(salt, 0, 0, 0, 0, meta, b"")
            length = size - 4 - len(empty)
            assert length >= 0, f"records of {size} bytes cannot hold this metadata"
        payload = rng.randbytes(length)
        where.append((item_id, base + len(out)))
        out += zero_led(salt, base + len(out), item_id, payload, 2 if rng.random() < 1 / 40 else 1, meta)
    return bytes(out), where


def image(
    count: int, seed: int, name: str = "q", first_id: int = 1, size: int | None = None
) -> tuple[bytes, FileHeader]:
    """A whole journal file image of :func:`records`."""
    header = FileHeader(salt=SALT, first_id=first_id, created_ms=1_700_000_000_000, name=name)
    head = encode_header(header)
    body, _ = records(SALT, len(head), first_id, count, seed, size)
    return head + body, header


def write_queue(
    directory: str, counts: list[int], seed: int, name: str = "q", size: int | None = None
) -> list[int]:
    """A queue directory holding one journal file per entry of ``counts`` (that many records
    each, ids consecutive across files); returns every id written."""
    os.makedirs(directory, exist_ok=True)
    first = 1
    for k, count in enumerate(counts):
        data, _ = image(count, seed + k, name, first, size)
        with open(journal_path(directory, name, 1_700_000_000_000 + k), "wb") as f:
            f.write(data)
        first += count
    return list(range(1, first))
