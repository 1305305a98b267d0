"""Read-only access to a queue directory, safe while another process owns and appends to it.

Used by the command-line tool and by tailing processes.  It never takes the directory lock and
never writes; records are walked by log/walker.py, like everywhere else.  Whatever is
incomplete or fails its CRC at the end of the newest file (a record or even a header) may simply
still be in flight from the writer, so it ends the scan ("not yet") instead of being reported;
damage anywhere else is reported and skipped, never delivered.  A file of an unknown format
version raises :class:`UnsupportedVersion`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import attrs

from journaled.disk.layout import detect_queue_name, inspect_journal, list_journal_files
from journaled.errors import UnsupportedVersion
from journaled.format.record import HEADER_FIXED_SIZE, MAX_NAME_BYTES, FileHeader, Put
from journaled.log.walker import READ_CHUNK, FileWalker, Span

#: A file shorter than this may be a header still being written.
_MAX_HEADER = HEADER_FIXED_SIZE + MAX_NAME_BYTES + 4


@attrs.frozen
class ScannedFile:
    """One journal file as listed: its header (rebuilt from the records when ``error`` says the
    stored one is damaged), or why it could not be read."""

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

    def __init__(
        self, directory: str | os.PathLike[str], name: str | None = None, *, window: int = READ_CHUNK
    ) -> None:
        self.directory = os.fspath(directory)
        self.name = name or detect_queue_name(self.directory)
        self.damage: list[ScanDamage] = []
        #: bytes read at a time (a record longer than that is read whole); any size reads the same
        self.window = window

    def files(self) -> list[ScannedFile]:
        """The journal files, oldest first.  Raises :class:`UnsupportedVersion` for a file of a
        newer format, which must not be guessed at."""
        out = []
        for ms, path in list_journal_files(self.directory, self.name):
            try:
                check = inspect_journal(path, self.name, ms)
            except FileNotFoundError:
                continue  # archived while we looked
            if not check.ours:
                continue  # not a journal file: nothing of ours to read
            out.append(ScannedFile(path, ms, check.header, check.size, check.problem))
        return out

    def records(self, start_id: int = 0, stop_id: int | None = None) -> Iterator[Put]:
        """Every valid record with ``id >= start_id`` (and ``<= stop_id``), oldest first, as of
        now (a :class:`~journaled.format.record.PutX`, with its ``meta``, for an item put with
        metadata).  Files wholly outside the range are not read past their header."""
        files = self.files()
        for k, sf in enumerate(files):
            if stop_id is not None and sf.header is not None and sf.header.first_id > stop_id:
                return
            newest = k == len(files) - 1
            if sf.header is None:
                if newest and sf.size < _MAX_HEADER:
                    return  # a file being created: its header is not written yet
                self.damage.append(ScanDamage(sf.path, 0, sf.error or "bad header", sf.size))
                continue
            if sf.error is not None and ScanDamage(sf.path, 0, sf.error, 0) not in self.damage:
                self.damage.append(ScanDamage(sf.path, 0, sf.error, 0))  # header rebuilt from the records
            nxt = files[k + 1] if not newest else None
            if nxt is not None and nxt.header is not None and nxt.header.first_id <= start_id:
                continue  # every id in this file is below start_id
            for rec in self._file_records(sf, start_id, last=newest):
                if stop_id is not None and rec.id > stop_id:
                    return
                yield rec

    def _file_records(self, sf: ScannedFile, start_id: int, last: bool) -> Iterator[Put]:
        assert sf.header is not None
        try:
            fd = os.open(sf.path, os.O_RDONLY)
        except FileNotFoundError:
            return

        def report(span: Span, rest: bytes) -> bool:
            if span.resume is None and last:
                return False  # at the tail of the newest file: possibly still being written
            self.damage.append(
                ScanDamage(sf.path, span.offset, span.reason, span.length(span.offset + len(rest)))
            )
            return True

        try:
            size = os.fstat(fd).st_size
            walker = FileWalker(
                lambda n, off: os.pread(fd, n, off),
                sf.header.salt,
                sf.header.size,
                size,
                sf.header.first_id,
                report,
                chunk=self.window,
            )
            try:
                for batch in walker:
                    for rec in batch:
                        if rec.id >= start_id:
                            yield rec
            except UnsupportedVersion as exc:  # [F-11]: every record before it was yielded
                # named by its file; of its kind (CompressionUnavailable names the extra)
                raise type(exc)(sf.path, exc.offset, exc.reason) from None
        finally:
            os.close(fd)
