"""The compressed units in a one-file queue, read straight off the bytes (for tests that damage
or time them)."""

from __future__ import annotations

import glob
import os

from journaled.format.record import Unit, decode_header, decode_one


def file_units(path: str) -> tuple[str, int, list[Unit]]:
    """The queue ``path``'s only journal file, its salt, and its PUTZ records in file order."""
    (f,) = glob.glob(os.path.join(path, "q.[0-9]*"))
    with open(f, "rb") as fh:
        data = fh.read()
    header = decode_header(data)
    pos, out = header.size, []
    while pos < len(data):
        rec = decode_one(data, pos, 0, header.salt)
        if isinstance(rec, Unit):
            out.append(rec)
        pos += rec.size  # type: ignore[union-attr]
    return f, header.salt, out
