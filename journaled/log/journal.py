"""The infinite scroll: one queue's journal files, behind a narrow facade.

A queue directory holds files named ``<queue>.<creation ms>``; each starts with a header and
holds PUT records with consecutive ids (docs/format.md).  Only the newest file is written.  The
:class:`Journal` facade is all the layers above see; its parts each do one job on a shared
:class:`~journaled.log.state.LogState`:

=============  ==========================================================================
log/opening.py     opening: headers, the recovery plan carried out, the next id
log/writer.py      appending into a buffer, writing out, rotating, group-commit syncs
log/cursors.py     records by cursor and by id, through the one walker (log/walker.py)
log/positions.py       positions from memory: hints, sizes, ages; lookup by time
log/retention.py   which files every reader passed; archiving them
=============  ==========================================================================

Thread safety: every part takes the journal lock (``LogState.lock``) for short sections; fsync
never runs under it on the hot path (see log/writer.py).  The facade adds no lock and no state.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from journaled.config import QueueConfig, stored_compression
from journaled.disk.groupcommit import GroupCommit
from journaled.disk.layout import detect_queue_name, list_journal_files
from journaled.errors import CompressionUnavailable, JournalIOError
from journaled.format import compressed
from journaled.log.cursors import CursorReader
from journaled.log.opening import open_journal
from journaled.log.positions import Positions
from journaled.log.retention import archivable, archive, past_retention
from journaled.log.state import Cursor, JournalFile, LogState, RecoveryEvent, now_ms
from journaled.log.writer import Writer

log = logging.getLogger("journaled")

__all__ = [
    "Cursor",
    "Journal",
    "JournalFile",
    "RecoveryEvent",
    "detect_queue_name",
    "list_journal_files",
    "now_ms",
]


class Journal:
    """The journal of one open queue (see the module docstring for its parts)."""

    def __init__(self, directory: str, name: str, config: QueueConfig, id_floor: int = 1) -> None:
        """Open (recovering) or create the journal of queue ``name`` in ``directory``.

        ``id_floor``: ids below it have been handed out before; new items never get one.
        """
        self.directory = directory
        self.name = name
        self.config = config
        state = self._state = LogState(directory, name, config)
        writer = self._writer = Writer(state)
        open_journal(state, writer, id_floor)
        self._reading = CursorReader(state, writer)
        self._positions = Positions(state, writer, self._reading)
        # perf: the hot calls are the parts' own bound methods, not a forwarding frame
        self.append_one = writer.append_one
        self.append = writer.append
        self.append_meta = writer.append_meta
        self.write_out = writer.write_out
        self.sync = writer.sync
        self.check_home = writer.check_home
        self.wait_durable = writer.commits.wait_durable
        self.read = self._reading.read
        self.locate = self._reading.locate
        self.first_id = self._positions.first_id
        self.hint = self._positions.hint
        self.locate_time = self._positions.locate_time
        self.file_created_s = self._positions.file_created_s
        self.disk_usage = self._positions.disk_usage
        self.bytes_from = self._positions.bytes_from
        self.end_cursor = self._positions.end_cursor

    def appending_parts(self) -> tuple[LogState, Writer]:
        """The state and the writer :meth:`append_one` works on, for the owner's put path
        (owner/putpath.py), which calls the writer directly (both compiled by mypyc)."""
        return self._state, self._writer

    @property
    def next_id(self) -> int:
        """The id the next appended item gets."""
        return self._state.next_id

    @property
    def compressed(self) -> bool:
        """Are batches written as compressed units (the queue's stored ``compression``)?"""
        return self._writer.compress

    @property
    def files(self) -> list[JournalFile]:
        """The journal's files, oldest first (a copy)."""
        with self._state.lock:
            return list(self._state.files)

    @property
    def recovery_report(self) -> list[RecoveryEvent]:
        """What recovery did at open, and damage met since (appended to as it happens)."""
        return self._state.recovery_report

    @property
    def commits(self) -> GroupCommit:
        return self._writer.commits

    @property
    def dirty(self) -> bool:
        """Bytes were appended that are not known durable yet."""
        return self._writer.dirty

    @property
    def poisoned(self) -> JournalIOError | None:
        """The I/O error after which the journal refuses writes until reopened, if any."""
        return self._state.poisoned

    @property
    def poisoned_since(self) -> float | None:
        """Wall-clock time (epoch seconds) the journal started refusing writes, if it does."""
        return self._state.poisoned_at

    @property
    def gone(self) -> bool:
        """The directory or the file being written was removed or replaced (see log/writer.py)."""
        return self._writer.gone

    def reserve(self, sizes: Sequence[int]) -> None:
        """Create now every journal file that appending payloads of ``sizes`` (in order) will
        rotate into, so that those appends cannot fail on an ``open``: the spool adopter calls it
        before its intent line (see log/writer.py).  A failed open raises
        :class:`JournalIOError` and poisons nothing."""
        self._writer.reserve(sizes)

    def archivable(self, min_head: int) -> list[JournalFile]:
        """Files whose every record has an id below ``min_head`` (never the active file)."""
        return archivable(self._state, min_head)

    def past_retention(
        self, age_ms: int | None, max_bytes: int | None, now_ms: int
    ) -> tuple[list[JournalFile], int]:
        """The oldest files past a retention limit (never the active file) and the first id
        kept (see log/retention.py)."""
        return past_retention(self._state, age_ms, max_bytes, now_ms)

    def archive(self, files: list[JournalFile], archive_dir: str | None) -> None:
        """Delete ``files`` (or move them into ``archive_dir``) and forget them; nothing once the
        directory is gone (the names may now belong to somebody else's files)."""
        if self._writer.gone:
            return
        archive(self._state, files, archive_dir)

    def close(self) -> None:
        """Write out and fsync what is buffered (unless poisoned), then release every fd."""
        st = self._state
        if st.closed:
            return
        try:
            if st.poisoned is None and self.config.sync != "never":
                self._writer.sync()
            elif st.poisoned is None:
                self._writer.write_out()
        finally:
            with st.lock:
                st.close()
                self._writer.close_locked()

    def abandon(self) -> None:
        """In a process forked after the open: close this process's copies of the descriptors
        and write nothing (the buffer holds the parent's bytes; the parent still owns the files).
        Takes no lock: a thread of the parent may have held it at the fork."""
        self._state.close()
        self._writer.close_locked(discard_spares=False)

    def compress_as_stored(self, stored: dict[str, Any]) -> None:
        """Write new batches with the codec of the stored queue settings ``stored`` (after this
        open's config applied; docs/format.md 4.5).  A stored value this version cannot apply is
        logged and gives plain records (always readable); a codec without its binding raises
        :class:`~journaled.errors.CompressionUnavailable`, naming the extra."""
        try:
            codec = stored_compression(stored)
        except (TypeError, ValueError) as exc:
            log.warning("queue %s: stored compression not applied: %s", self.directory, exc)
            codec = None
        if codec is not None and not compressed.available():
            # the setting, not a record, needs the binding here: say how to do without it
            off = f"journaled config {self.directory} queue --compression none"
            why = f"the queue's stored compression={codec!r} needs a zstd binding (or turn it off: {off})"
            raise CompressionUnavailable(self.directory, 0, why)
        self._writer.set_compression(codec is not None)
