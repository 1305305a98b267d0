"""Positions in the journal from memory: which file holds an id, checkpoint hints, sizes, ages,
and the one lookup by time (a binary search over files, then one bounded scan).

Everything here answers from the file list and the sparse index under the journal lock, without
I/O, except :meth:`Positions.locate_time`, which reads through log/cursors.py.
"""

from __future__ import annotations

from bisect import bisect_right

from journaled.log.cursors import CursorReader
from journaled.log.state import Cursor, JournalFile, LogState
from journaled.log.writer import Writer


class Positions:
    """Id, time and size questions about ``state``'s journal."""

    def __init__(self, state: LogState, writer: Writer, reading: CursorReader) -> None:
        self.state = state
        self.writer = writer
        self.reading = reading

    def first_id(self) -> int:
        """Smallest id still in the journal (``next_id`` if it is empty)."""
        with self.state.lock:
            return self.state.files[0].first_id if self.state.files else self.state.next_id

    def hint(self, item_id: int) -> tuple[int, int]:
        """``(file ms, offset)`` of an indexed record at or before ``item_id``, from memory only
        (stored in checkpoints so that a reopened reader need not scan for its head)."""
        with self.state.lock:
            jf = self.state.files[self.state.file_of(item_id)]
            k = bisect_right(jf.index_ids, item_id) - 1
            if k >= 0:
                return jf.ms, jf.index_offsets[k]
            return jf.ms, jf.header.size

    def file_created_s(self, item_id: int) -> float:
        """Creation time (epoch seconds) of the file holding ``item_id``: no item in it is
        older, so it bounds the age of ``item_id`` from above without any I/O."""
        with self.state.lock:
            return self.state.files[self.state.file_of(item_id)].header.created_ms / 1000.0

    def disk_usage(self) -> tuple[int, int]:
        """``(files, bytes)`` of the journal, buffered bytes included; from memory, no I/O."""
        with self.state.lock:
            files = self.state.files
            return len(files), sum(f.size for f in files) + len(self.writer.buf)

    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int:
        """Journal bytes from the record of ``item_id`` to the end, from memory only: exact when
        ``(hint_ms, hint_offset)`` is that record's position, else counted from the nearest known
        position before it (sparse index, or the start of its file): never an under-estimate."""
        with self.state.lock:
            files = self.state.files
            i = self.state.file_of(item_id)
            jf = files[i]
            k = bisect_right(jf.index_ids, item_id) - 1
            pos = jf.index_offsets[k] if k >= 0 else jf.header.size
            if hint_ms == jf.ms and pos <= hint_offset <= jf.size:
                pos = hint_offset
            total = max(0, jf.size - pos) + len(self.writer.buf)
            for f in files[i + 1 :]:
                total += f.size - f.header.size
            return total

    def end_cursor(self) -> Cursor:
        """Cursor just past the last appended record."""
        with self.state.lock:
            jf = self.state.files[-1]
            return Cursor(jf.ms, jf.size + len(self.writer.buf), self.state.next_id)

    def _first_add_ms(self, jf: JournalFile) -> int | None:
        if jf.first_add_ms is not None:
            return jf.first_add_ms  # a file's first record never changes: read it once
        recs, _ = self.reading.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_bytes=1, max_items=1)
        if not recs:
            return None
        jf.cache_first_add_ms(recs[0].add_ms)
        return recs[0].add_ms

    def locate_time(self, when_ms: int) -> int:
        """Id of the first item added at or after ``when_ms`` (``next_id`` if none).

        Binary search over the files by the add time of their first record (add times never
        decrease: the queue clamps them), then a scan inside the one file that can hold it.
        """
        with self.state.lock:
            files = list(self.state.files)
        lo, hi = 0, len(files)  # find the last file whose first record is before when_ms
        while lo < hi:
            mid = (lo + hi) // 2
            first = self._first_add_ms(files[mid])
            if first is not None and first < when_ms:
                lo = mid + 1
            else:
                hi = mid
        i = max(0, lo - 1)
        cursor = Cursor(files[i].ms, files[i].header.size, files[i].first_id)
        # ids are consecutive: bound each read to this file, so the scan never runs on into the
        # files after it (one record of the next file at most, when the answer is its first)
        end_id = files[i + 1].first_id if i + 1 < len(files) else None
        while True:
            want = 4096 if end_id is None else max(1, min(4096, end_id - cursor.next_id))
            recs, cursor = self.reading.read(cursor, max_items=want)
            if not recs:
                return cursor.next_id
            for rec in recs:
                if rec.add_ms >= when_ms:
                    return rec.id
