"""Read-only access to a queue directory, safe while another process owns and appends to it.

Used by the command-line tool, by tailing processes and by the Spark source.  It never takes
the directory lock and never writes.  Whatever is incomplete or fails its CRC at the end of the
newest file (a record or even a header) may simply still be in flight from the writer, so it ends
the scan ("not yet") instead of being reported; damage anywhere else is reported and skipped,
never delivered.  A file of an unknown format version raises :class:`UnsupportedVersion`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import attrs

from journaled.config import MAX_ITEM_SIZE
from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.journal import detect_queue_name, list_journal_files
from journaled.record import (
    HEADER_FIXED_SIZE,
    MAX_NAME_BYTES,
    PUT_OVERHEAD,
    RECORD_HEADER_SIZE,
    FileHeader,
    Put,
    decode_header,
    decode_many,
    find_next_record,
)

CHUNK = 1 << 20
#: Same bound as the owner's: the largest body any writer can produce (format.md 4.3).
MAX_BODY = MAX_ITEM_SIZE + PUT_OVERHEAD
#: A file shorter than this may be a header still being written.
_MAX_HEADER = HEADER_FIXED_SIZE + MAX_NAME_BYTES + 4


@attrs.frozen
class ScannedFile:
    """One journal file as listed: its header, or why it could not be read."""

    path: str
    ms: int
    header: FileHeader | None
    size: int
    error: str | None = None


@attrs.define
class ScanDamage:
    """Bytes the scanner skipped: ``bytes_skipped`` from ``offset`` of ``path``."""

    path: str
    offset: int
    reason: str
    bytes_skipped: int


class JournalScanner:
    """Iterate the complete, valid records of a queue directory without owning it.

    ``records(start_id)`` reflects the files as they are at the call; to tail a live queue call
    it again with the id after the last record seen.  ``damage`` accumulates what was skipped.
    """

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None) -> None:
        self.directory = os.fspath(directory)
        self.name = name or detect_queue_name(self.directory)
        self.damage: list[ScanDamage] = []

    def files(self) -> list[ScannedFile]:
        """The journal files, oldest first.  Raises :class:`UnsupportedVersion` for a file of a
        newer format, which must not be guessed at."""
        out = []
        for ms, path in list_journal_files(self.directory, self.name):
            try:
                size = os.path.getsize(path)
                with open(path, "rb") as f:
                    header = decode_header(f.read(512), path)
                out.append(ScannedFile(path, ms, header, size))
            except FileNotFoundError:
                continue  # archived while we looked
            except UnsupportedVersion:
                raise
            except CorruptJournal as exc:
                out.append(ScannedFile(path, ms, None, size, str(exc)))
        return out

    def records(self, start_id: int = 0) -> Iterator[Put]:
        """Every valid record with ``id >= start_id``, oldest first, as of now."""
        files = self.files()
        for k, sf in enumerate(files):
            newest = k == len(files) - 1
            if sf.header is None:
                if newest and sf.size < _MAX_HEADER:
                    return  # a file being created: its header is not written yet
                self.damage.append(ScanDamage(sf.path, 0, sf.error or "bad header", sf.size))
                continue
            nxt = files[k + 1] if not newest else None
            if nxt is not None and nxt.header is not None and nxt.header.first_id <= start_id:
                continue  # every id in this file is below start_id
            yield from self._file_records(sf, start_id, last=newest)

    def _file_records(self, sf: ScannedFile, start_id: int, last: bool) -> Iterator[Put]:
        assert sf.header is not None
        salt = sf.header.salt
        try:
            fd = os.open(sf.path, os.O_RDONLY)
        except FileNotFoundError:
            return
        try:
            size = os.fstat(fd).st_size
            pos = sf.header.size
            expected = sf.header.first_id
            while pos < size:
                data = os.pread(fd, min(CHUNK, size - pos), pos)
                recs, end, damage = decode_many(data, pos, salt, max_body=MAX_BODY)
                for rec in recs:
                    if isinstance(rec, Put):
                        expected = rec.id + 1
                        if rec.id >= start_id:
                            yield rec
                pos += end
                if damage is None:
                    continue
                if damage.incomplete and end > 0:
                    continue  # record straddles the chunk: next pread starts at it
                if damage.incomplete and pos + len(data) < size:
                    # a single record larger than CHUNK (its length was checked against MAX_BODY)
                    length = int.from_bytes(os.pread(fd, RECORD_HEADER_SIZE, pos)[4:8], "little")
                    big = os.pread(fd, min(RECORD_HEADER_SIZE + length, size - pos), pos)
                    recs, end, _ = decode_many(big, pos, salt, max_body=MAX_BODY, limit=1)
                    if recs:
                        rec = recs[0]
                        if isinstance(rec, Put):
                            expected = rec.id + 1
                            if rec.id >= start_id:
                                yield rec
                        pos += end
                        continue
                rest = os.pread(fd, size - pos, pos)
                found = find_next_record(rest, 1, pos, salt, expected, MAX_BODY)
                if found is None:
                    if not last:
                        self.damage.append(ScanDamage(sf.path, pos, damage.reason, size - pos))
                    return  # at the tail of the newest file: possibly still being written
                self.damage.append(ScanDamage(sf.path, pos, damage.reason, found))
                pos += found
        finally:
            os.close(fd)
