"""Reading the journal by cursor and by id: what read-behind and ``locate`` use.

Every byte is read through the one record walker (log/walker.py); this module adds what only an
owner does: crossing from file to file, learning sparse-index points from what it reads, and
applying the queue's recovery mode to damage met *after* opening (older files are verified
lazily, when first read):

* ``strict`` / ``tolerate_tail``: every file was verified at open, so new damage raises
  :class:`CorruptJournal`;
* ``point_in_time`` in a file older than the newest: the file ends at the damage for every
  reader (the rest is kept aside once in a ``*.damaged`` file);
* otherwise (``salvage``, the default) exactly the damaged bytes are skipped, reported once with
  the ids they held (``recovery_report``), and every record that validates after them is
  delivered.

Read descriptors are shared per file (:class:`~journaled.log.state.SharedFd`) and used outside the
journal lock under a reference, so archiving can never close one mid-read.
"""

from __future__ import annotations

import logging
from bisect import bisect_right

from journaled.disk import fileio
from journaled.errors import CorruptJournal, QueueClosed, UnsupportedVersion
from journaled.format.record import Put
from journaled.log.state import INDEX_EVERY, Cursor, JournalFile, LogState, RecoveryEvent, keep_aside
from journaled.log.walker import READ_CHUNK, FileWalker, Reporter, Span
from journaled.log.writer import Writer

log = logging.getLogger("journaled")


class CursorReader:
    """Reads records of ``state``'s files (``writer``'s buffer is written out when needed)."""

    def __init__(self, state: LogState, writer: Writer) -> None:
        self.state = state
        self.writer = writer

    def read(
        self, cursor: Cursor, max_bytes: int = READ_CHUNK, max_items: int = 1 << 30
    ) -> tuple[list[Put], Cursor]:
        """Read whole records from ``cursor`` onward (at least one if any exists), at most
        ``max_bytes`` of payload and ``max_items``; return them and the cursor after them.

        Damage met on the way is handled per the recovery mode (module docstring).  Never
        returns a record that failed its CRC.
        """
        st = self.state
        out: list[Put] = []
        payload_bytes = 0
        while len(out) < max_items and payload_bytes < max_bytes:
            with st.lock:
                if st.closed:
                    raise QueueClosed("journal is closed")
                i = st.file_index(cursor.ms)
                if i < 0:
                    # The cursor's file was archived or set aside.  A cursor left exactly at its
                    # end (next_id == the next file's first id) is the common case: a reader
                    # whose last refill stopped at a file boundary, then committed past it.
                    first = st.files[0]
                    if cursor.next_id <= first.first_id:
                        cursor = Cursor(first.ms, first.header.size, first.first_id)
                        continue
                    shared = None  # ids beyond the oldest file's first: find them by id
                else:
                    jf = st.files[i]
                    last = i == len(st.files) - 1
                    nxt = None if last else st.files[i + 1]
                    if last and self.writer.buf and cursor.offset >= jf.size:
                        self.writer.write_out_locked()
                    limit = jf.size
                    shared = st.read_fd(jf)
                    fd = shared.acquire()
            if shared is None:
                cursor = self.locate(cursor.next_id)
                continue
            try:
                if cursor.offset >= limit:
                    if nxt is None:
                        break
                    cursor = Cursor(nxt.ms, nxt.header.size, max(cursor.next_id, nxt.first_id))
                    continue
                walker = FileWalker(
                    lambda n, off: fileio.ops.pread(fd, n, off),
                    jf.header.salt,
                    cursor.offset,
                    limit,
                    cursor.next_id,
                    self._reporter(jf),
                )
                try:
                    recs = walker.read_batch(
                        max_bytes - payload_bytes, max_items - len(out), at_least_one=not out
                    )
                except UnsupportedVersion as exc:
                    if out:
                        break  # what came before it first; the next read stops there again
                    raise type(exc)(jf.path, exc.offset, exc.reason) from None  # of its kind
            finally:
                with st.lock:
                    shared.release()
            cursor = Cursor(jf.ms, walker.pos, walker.expected)
            if recs:
                if out:
                    out += recs
                else:
                    out = recs
                self._learn_index(jf, recs)
            if not walker.done:
                # The walker stops short of its file's end only when the budget is spent (max_items,
                # max_bytes, or the next record does not fit): another pass would read nothing.
                break
            # perf: the payload taken so far only matters for going on into the next file
            payload_bytes += sum(len(r.payload) for r in recs)
        return out, cursor

    def _learn_index(self, jf: JournalFile, recs: list[Put]) -> None:
        """Add sparse-index points for records just read.  Files older than the newest have no
        index after a reopen (only the newest is scanned), and a reader's checkpoint takes its
        position hint from the index: without this, a reopened reader would scan its head's
        file from the start."""
        last = jf.index_offsets[-1] if jf.index_offsets else -INDEX_EVERY
        if recs[-1].offset - last < INDEX_EVERY:
            return  # nothing new here (also when the index already reaches further)
        with self.state.lock:
            for rec in recs:
                jf.note(rec.id, rec.offset)

    def _reporter(self, jf: JournalFile) -> Reporter:
        st = self.state
        mode = st.config.recovery

        def report(span: Span, rest: bytes) -> bool:
            if mode in ("strict", "tolerate_tail"):
                # every file was verified at open: this is damage that appeared since
                raise CorruptJournal(jf.path, span.offset, f"{span.reason} (recovery={mode!r})")
            if mode == "point_in_time":
                with st.lock:
                    i = st.file_index(jf.ms)
                    if 0 <= i < len(st.files) - 1:
                        self._cut_older_locked(jf, i, span, rest)
                        return False
            lost = span.length(span.offset + len(rest))
            with st.lock:
                ids = span.lost_ids()
                i = st.file_index(jf.ms)
                if ids is None and span.resume is None and 0 <= i < len(st.files) - 1:
                    # nothing valid after it in this file: the ids up to the next file's first
                    nxt_first = st.files[i + 1].first_id
                    ids = (span.expected, nxt_first - 1) if nxt_first > span.expected else None
                event = RecoveryEvent(jf.path, span.offset, "skipped-damage", span.reason, lost, ids)
                if st.report(event):
                    log.warning(
                        "%s: damaged record at offset %d (%s): skipped %d bytes, ids lost %s",
                        jf.path,
                        span.offset,
                        span.reason,
                        lost,
                        event.ids_lost,
                    )
            return True

        return report

    def _cut_older_locked(self, jf: JournalFile, i: int, span: Span, rest: bytes) -> None:
        """Point-in-time recovery met damage in an older file: the file ends here for every
        reader; the rest is kept aside once."""
        st = self.state
        if jf.size <= span.offset:
            return
        # bytes that end inside a record are worth nothing only when no valid record follows them
        kept = None if span.torn else keep_aside(st, jf.path, span.offset, rest)
        nxt_first = st.files[i + 1].first_id
        ids = (span.expected, nxt_first - 1) if nxt_first > span.expected else None
        st.report(
            RecoveryEvent(jf.path, span.offset, "cut-at-damage", span.reason, len(rest), ids, kept=kept)
        )
        log.warning(
            "%s: damaged record at offset %d (%s): file ends here (point_in_time), %d bytes "
            "kept in %s, ids lost %s",
            jf.path,
            span.offset,
            span.reason,
            len(rest),
            kept,
            ids,
        )
        jf.end_at(span.offset)

    # ----------------------------------------------------------------------------- by id
    def record_at(self, ms: int, offset: int, max_id: int) -> Cursor | None:
        """A cursor at the record at ``offset`` of file ``ms`` if a valid PUT with an id at or
        below ``max_id`` starts there (checks a checkpoint's position hint), else None."""
        st = self.state
        with st.lock:
            i = st.file_index(ms)
            if i < 0:
                return None
            jf = st.files[i]
            if not jf.header.size <= offset < jf.size:
                return None
            shared = st.read_fd(jf)
            fd = shared.acquire()
        try:
            walker = FileWalker(
                lambda n, off: fileio.ops.pread(fd, n, off),
                jf.header.salt,
                offset,
                jf.size,
                0,
                lambda span, rest: False,
                chunk=4096,
            )
            recs = walker.read_batch(max_bytes=1, max_items=1)
        finally:
            with st.lock:
                shared.release()
        if recs and recs[0].offset == offset and recs[0].id <= max_id:
            return Cursor(jf.ms, offset, recs[0].id)
        return None

    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor:
        """Cursor at the record of ``item_id`` (or the first record after it): one file pick by
        first id, then a scan from the nearest known point (sparse index, or a checkpoint's
        verified ``hint``) inside that file."""
        st = self.state
        with st.lock:
            jf = st.files[st.file_of(item_id)]
            k = bisect_right(jf.index_ids, item_id) - 1
            if k >= 0:
                start_id, start_off = jf.index_ids[k], jf.index_offsets[k]
            else:
                start_id, start_off = jf.first_id, jf.header.size
            if item_id <= start_id:
                return Cursor(jf.ms, start_off, start_id)
        cur = Cursor(jf.ms, start_off, start_id)
        if hint is not None and hint.ms == jf.ms:
            checked = self.record_at(hint.ms, hint.offset, item_id)
            if checked is not None and checked.next_id > start_id:
                cur = checked
        while cur.next_id < item_id:
            recs, nxt = self.read(cur, max_items=min(4096, item_id - cur.next_id))
            if not recs:
                return nxt
            over = next((k for k, r in enumerate(recs) if r.id >= item_id), None)
            if over is not None:
                # ids skipped by damage: more ids than records were passed, so the read went
                # beyond item_id; stop just before the first record at or after it
                if over == 0:
                    return cur
                recs, nxt = self.read(cur, max_items=over)
            cur = nxt
        return cur
