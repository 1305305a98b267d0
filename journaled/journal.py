"""The infinite scroll: append-only journal files, rotation, recovery scan and reading by id.

A queue directory holds files named ``<queue>.<creation ms>``; each starts with a header (see
record.py) and holds PUT records with consecutive ids.  Only the newest file is written.  Opening
scans only that newest file (to find a torn tail and the next id); older files are known by their
headers, so opening a large journal costs one header read per file plus one file scan.

Thread safety: ``append`` and ``read`` take the journal's own short lock; durability waits go
through :class:`~journaled.sync.GroupCommit` so fsync never runs under that lock on the hot path.
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import secrets
import threading
import time
from collections.abc import Callable, Sequence

import attrs

from journaled import fileio
from journaled.config import QueueConfig
from journaled.errors import CorruptJournal, JournalIOError, QueueClosed
from journaled.record import (
    PUT_OVERHEAD,
    RECORD_HEADER_SIZE,
    Damage,
    FileHeader,
    Put,
    decode_header,
    decode_many,
    encode_header,
    encode_puts,
    find_next_record,
)
from journaled.sync import GroupCommit

log = logging.getLogger("journaled")

#: One sparse index entry (id, offset) per this many bytes of journal: bounds the in-file scan
#: when locating an id to ~64 KiB of reading.
INDEX_EVERY = 64 * 1024
#: Under a periodic policy the buffer is handed to the OS once it grows past this.
WRITE_OUT_AT = 1024 * 1024
READ_CHUNK = 1024 * 1024


@attrs.frozen
class RecoveryEvent:
    """One thing recovery did: which file, where, what, how many bytes and ids were lost."""

    path: str
    offset: int
    action: str  # "truncated-tail", "skipped-damage", "skipped-file"
    reason: str
    bytes_lost: int
    ids_lost: tuple[int, int] | None = None  # inclusive range, when known


@attrs.frozen
class Cursor:
    """A position in the journal: the record of ``next_id`` starts at ``offset`` of file ``ms``."""

    ms: int
    offset: int
    next_id: int


@attrs.define(eq=False)
class JournalFile:
    """What the journal knows about one file without reading all of it."""

    path: str
    ms: int
    header: FileHeader
    size: int  # bytes on disk that hold valid records (for the active file: written so far)
    index_ids: list[int] = attrs.field(factory=list)
    index_offsets: list[int] = attrs.field(factory=list)

    @property
    def first_id(self) -> int:
        return self.header.first_id

    def note(self, item_id: int, offset: int) -> None:
        """Add a sparse-index point if far enough from the previous one."""
        if not self.index_offsets or offset - self.index_offsets[-1] >= INDEX_EVERY:
            self.index_ids.append(item_id)
            self.index_offsets.append(offset)


_FILE_RE_CACHE: dict[str, re.Pattern[str]] = {}


def journal_file_re(name: str) -> re.Pattern[str]:
    pat = _FILE_RE_CACHE.get(name)
    if pat is None:
        pat = _FILE_RE_CACHE[name] = re.compile(re.escape(name) + r"\.(\d{1,20})")
    return pat


def list_journal_files(directory: str, name: str) -> list[tuple[int, str]]:
    """``(ms, path)`` of every journal file of queue ``name`` in ``directory``, oldest first."""
    pat = journal_file_re(name)
    found = []
    for entry in os.listdir(directory):
        m = pat.fullmatch(entry)
        if m:
            found.append((int(m.group(1)), os.path.join(directory, entry)))
    found.sort()
    return found


def now_ms() -> int:
    return time.time_ns() // 1_000_000


class Journal:
    """The writer side of a queue's journal (one per open queue)."""

    def __init__(self, directory: str, name: str, config: QueueConfig) -> None:
        self.directory = directory
        self.name = name
        self.config = config
        self.recovery_report: list[RecoveryEvent] = []
        self.files: list[JournalFile] = []
        self._lock = threading.Lock()
        self._buf = bytearray()
        self._fd = -1
        self._read_fds: dict[int, int] = {}
        self._retired_fds: list[int] = []
        self._appended = 0  # session byte sequence: appended / written out to the OS
        self._written = 0
        self._poisoned: JournalIOError | None = None
        self.last_add_ms = 0  # add times never go backwards (binary search relies on it)
        self._closed = False
        self.commits = GroupCommit(self._flush_for_sync)
        self._open()

    # ----------------------------------------------------------------------------- opening
    def _open(self) -> None:
        for ms, path in list_journal_files(self.directory, self.name):
            try:
                with open(path, "rb") as f:
                    head = f.read(512)
                header = decode_header(head, path)
            except CorruptJournal as exc:
                size = os.path.getsize(path)
                self._set_aside(path, exc.reason, size)
                continue
            self.files.append(JournalFile(path, ms, header, os.path.getsize(path)))
        if self.files:
            self._recover_last()
            self.next_id = self._next_id_after_scan
            last = self.files[-1]
            self._fd = fileio.ops.open(last.path, os.O_WRONLY | os.O_APPEND, self.config.file_mode)
        else:
            self.next_id = 1
            self._create_file(now_ms())

    def _set_aside(self, path: str, reason: str, size: int) -> None:
        """Move an unreadable file out of the journal, keeping its bytes for inspection."""
        self.recovery_report.append(RecoveryEvent(path, 0, "skipped-file", reason, size))
        log.warning("journal file %s is unreadable (%s); moved to %s.damaged", path, reason, path)
        fileio.ops.rename(path, path + ".damaged")
        fileio.ops.fsync_dir(self.directory)

    def _recover_last(self) -> None:
        """Scan the newest file completely: cut a torn tail, skip mid-file damage, index it."""
        jf = self.files[-1]
        data = fileio.ops.read_file(jf.path)
        pos = jf.header.size
        expected = jf.first_id
        max_body = self.config.max_item_size + PUT_OVERHEAD
        while True:
            recs, pos, damage = decode_many(data, 0, jf.header.salt, pos, max_body)
            for rec in recs:
                if isinstance(rec, Put):
                    jf.note(rec.id, rec.offset)
                    expected = rec.id + 1
                    self.last_add_ms = max(self.last_add_ms, rec.add_ms)
            if damage is None:
                break
            nxt = find_next_record(data, pos + 1, 0, jf.header.salt, expected, max_body)
            if nxt is None:
                cut = len(data) - pos
                self.recovery_report.append(
                    RecoveryEvent(jf.path, pos, "truncated-tail", damage.reason, cut)
                )
                log.warning(
                    "%s: cut %d bytes of torn/invalid tail at offset %d (%s)",
                    jf.path, cut, pos, damage.reason,
                )
                fd = fileio.ops.open(jf.path, os.O_WRONLY, self.config.file_mode)
                try:
                    fileio.ops.ftruncate(fd, pos)
                    fileio.ops.fsync(fd)
                finally:
                    fileio.ops.close(fd)
                data = data[:pos]
                break
            first = decode_many(data, 0, jf.header.salt, nxt, max_body, limit=1)[0][0]
            assert isinstance(first, Put)
            lost = (expected, first.id - 1) if first.id > expected else None
            self.recovery_report.append(
                RecoveryEvent(jf.path, pos, "skipped-damage", damage.reason, nxt - pos, lost)
            )
            log.warning(
                "%s: damaged bytes %d..%d skipped (%s); ids lost: %s",
                jf.path, pos, nxt, damage.reason, lost,
            )
            pos = nxt
        jf.size = len(data)
        self._next_id_after_scan = expected

    def _create_file(self, ms: int) -> None:
        """Start a new journal file whose first record will get id ``self.next_id``."""
        if self.files and ms <= self.files[-1].ms:
            ms = self.files[-1].ms + 1  # names must stay unique and sortable
        path = os.path.join(self.directory, f"{self.name}.{ms}")
        header = FileHeader(
            salt=secrets.randbits(32), first_id=self.next_id, created_ms=now_ms(), name=self.name
        )
        raw = encode_header(header)
        fd = fileio.ops.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, self.config.file_mode)
        try:
            fileio.ops.write(fd, raw)
            if self.config.sync != "never":
                fileio.ops.fdatasync(fd)
                fileio.ops.fsync_dir(self.directory)
        except OSError as exc:
            fileio.ops.close(fd)
            raise self._poison(exc) from exc
        self._fd = fd
        jf = JournalFile(path, ms, header, len(raw))
        jf.note(self.next_id, len(raw))
        self.files.append(jf)

    # ----------------------------------------------------------------------------- writing
    def _poison(self, exc: OSError) -> JournalIOError:
        err = JournalIOError(exc.errno, f"journal write failed: {exc.strerror or exc}", exc.filename)
        self._poisoned = err
        return err

    def _check_writable(self) -> None:
        if self._closed:
            raise QueueClosed("journal is closed")
        if self._poisoned is not None:
            raise JournalIOError(
                self._poisoned.errno,
                f"queue refuses writes after an earlier I/O failure ({self._poisoned.strerror}); "
                "close and reopen it",
            )

    def append(
        self, payloads: Sequence[bytes], add_ms: int, expire_ms: int
    ) -> tuple[int, int, int]:
        """Append PUT records; return ``(first_id, add_ms, seq)``.

        ``add_ms`` is the add time actually recorded (never earlier than a previous one).

        ``seq`` is the byte sequence number to pass to ``wait_durable``.  Items are never split
        across files: a record that would pass ``journal_size`` goes to a fresh file.
        """
        with self._lock:
            self._check_writable()
            add_ms = max(add_ms, self.last_add_ms)
            self.last_add_ms = add_ms
            first_id = self.next_id
            limit = self.config.journal_size
            i = 0
            n = len(payloads)
            while i < n:
                jf = self.files[-1]
                pos = jf.size + len(self._buf)
                # take as many payloads as fit in this file (at least one in an empty file)
                j = i
                end = pos
                while j < n:
                    rec = PUT_OVERHEAD + len(payloads[j])
                    if end + rec > limit and (end > jf.header.size or j > i):
                        break
                    end += rec
                    j += 1
                if j == i:
                    self._rotate_locked()
                    continue
                before = len(self._buf)
                offs = encode_puts(
                    jf.header.salt, pos, self.next_id, add_ms, expire_ms, list(payloads[i:j]), self._buf
                )
                # sparse index, sampled
                for k in range(0, j - i, max(1, (j - i) // 8)):
                    jf.note(self.next_id + k, offs[k])
                self._appended += len(self._buf) - before
                self.next_id += j - i
                i = j
            if self.config.sync == "never" or len(self._buf) >= WRITE_OUT_AT:
                self._write_out_locked()
            return first_id, add_ms, self._appended

    def _write_out_locked(self) -> None:
        if not self._buf:
            return
        try:
            fileio.ops.write(self._fd, self._buf)
        except OSError as exc:
            # A partial write may have reached the file; the owner cuts it on reopen.
            raise self._poison(exc) from exc
        n = len(self._buf)
        self.files[-1].size += n
        self._written += n
        self._buf = bytearray()

    def _rotate_locked(self) -> None:
        self._write_out_locked()
        old = self._fd
        if self.config.sync != "never":
            try:
                fileio.ops.fdatasync(old)
            except OSError as exc:
                raise self._poison(exc) from exc
            self.commits.mark_durable(self._written)
        self._retired_fds.append(old)
        self._create_file(now_ms())

    def _flush_for_sync(self) -> tuple[int, Callable[[], None]]:
        with self._lock:
            for fd in self._retired_fds:
                fileio.ops.close(fd)
            self._retired_fds.clear()
            self._check_writable()
            self._write_out_locked()
            fd = self._fd
            target = self._written

        def fsync() -> None:
            try:
                fileio.ops.fdatasync(fd)
            except OSError as exc:
                raise self._poison(exc) from exc

        return target, fsync

    def sync(self) -> None:
        """Make everything appended so far durable."""
        self.wait_durable(self._appended)

    def wait_durable(self, seq: int) -> None:
        self.commits.wait_durable(seq)

    def write_out(self) -> None:
        """Hand buffered bytes to the OS (no fsync): makes them visible to other processes."""
        with self._lock:
            if not self._closed:
                self._write_out_locked()

    @property
    def dirty(self) -> bool:
        return self.commits.durable < self._appended

    # ----------------------------------------------------------------------------- reading
    def _file_index(self, ms: int) -> int:
        keys = [f.ms for f in self.files]
        i = bisect.bisect_left(keys, ms)
        return i if i < len(keys) and keys[i] == ms else -1

    def first_id(self) -> int:
        """Smallest id still in the journal (``next_id`` if it is empty)."""
        with self._lock:
            return self.files[0].first_id if self.files else self.next_id

    def hint(self, item_id: int) -> tuple[int, int]:
        """``(file ms, offset)`` of an indexed record at or before ``item_id``, from memory only
        (stored in checkpoints so that a reopened reader need not scan for its head)."""
        with self._lock:
            firsts = [f.first_id for f in self.files]
            i = max(0, bisect.bisect_right(firsts, item_id) - 1)
            jf = self.files[i]
            k = bisect.bisect_right(jf.index_ids, item_id) - 1
            if k >= 0:
                return jf.ms, jf.index_offsets[k]
            return jf.ms, jf.header.size

    def _check_hint(self, hint: Cursor, item_id: int) -> Cursor | None:
        """A cursor at the record ``hint`` points to, if that really is a record <= item_id."""
        with self._lock:
            i = self._file_index(hint.ms)
            if i < 0:
                return None
            jf = self.files[i]
            if not jf.header.size <= hint.offset < jf.size:
                return None
            fd = self._read_fd(jf)
        head = fileio.ops.pread(fd, PUT_OVERHEAD, hint.offset)
        if len(head) < PUT_OVERHEAD:
            return None
        length = int.from_bytes(head[4:8], "little")
        if length > self.config.max_item_size + PUT_OVERHEAD:
            return None
        raw = fileio.ops.pread(fd, RECORD_HEADER_SIZE + length, hint.offset)
        recs = decode_many(raw, hint.offset, jf.header.salt, 0, limit=1)[0]
        if recs and isinstance(recs[0], Put) and recs[0].id <= item_id:
            return Cursor(jf.ms, hint.offset, recs[0].id)
        return None

    def locate(self, item_id: int, hint: Cursor | None = None) -> Cursor:
        """Cursor at the record of ``item_id`` (or the first record after it): one file pick by
        first id, then a scan from the nearest known point (sparse index, or a checkpoint's
        verified ``hint``) inside that file."""
        with self._lock:
            firsts = [f.first_id for f in self.files]
            i = max(0, bisect.bisect_right(firsts, item_id) - 1)
            jf = self.files[i]
            k = bisect.bisect_right(jf.index_ids, item_id) - 1
            if k >= 0:
                start_id, start_off = jf.index_ids[k], jf.index_offsets[k]
            else:
                start_id, start_off = jf.first_id, jf.header.size
            if item_id <= start_id:
                return Cursor(jf.ms, start_off, start_id)
        cur = Cursor(jf.ms, start_off, start_id)
        if hint is not None and hint.ms == jf.ms:
            checked = self._check_hint(hint, item_id)
            if checked is not None and checked.next_id > start_id:
                cur = checked
        while cur.next_id < item_id:
            recs, nxt = self.read(cur, max_items=min(4096, item_id - cur.next_id))
            if not recs:
                return nxt
            cur = nxt
        return cur

    def _read_fd(self, jf: JournalFile) -> int:
        fd = self._read_fds.get(jf.ms)
        if fd is None:
            fd = self._read_fds[jf.ms] = fileio.ops.open(jf.path, os.O_RDONLY)
        return fd

    def read(
        self, cursor: Cursor, max_bytes: int = READ_CHUNK, max_items: int = 1 << 30
    ) -> tuple[list[Put], Cursor]:
        """Read whole records from ``cursor`` onward (at least one if any exists) until about
        ``max_bytes`` of payload or ``max_items``; return them and the cursor after them.

        Damage met on the way is reported (``recovery_report``, a warning) and skipped: what
        lies after it and validates is still delivered.  Never returns a record that failed
        its CRC.
        """
        out: list[Put] = []
        payload_bytes = 0
        max_body = self.config.max_item_size + PUT_OVERHEAD
        while len(out) < max_items and payload_bytes < max_bytes:
            with self._lock:
                if self._closed:
                    raise QueueClosed("journal is closed")
                i = self._file_index(cursor.ms)
                if i < 0:
                    # the file was archived or set aside: jump to the oldest that remains
                    jf = self.files[0]
                    if cursor.next_id >= jf.first_id:
                        raise CorruptJournal(jf.path, 0, f"no journal file holds id {cursor.next_id}")
                    cursor = Cursor(jf.ms, jf.header.size, jf.first_id)
                    continue
                jf = self.files[i]
                last = i == len(self.files) - 1
                if last and self._buf and cursor.offset >= jf.size:
                    self._write_out_locked()
                limit = jf.size
                fd = self._read_fd(jf)
            if cursor.offset >= limit:
                if last:
                    break
                nxt = self.files[i + 1]
                cursor = Cursor(nxt.ms, nxt.header.size, max(cursor.next_id, nxt.first_id))
                continue
            want = min(limit - cursor.offset, max(READ_CHUNK, max_bytes - payload_bytes + 4096))
            data = fileio.ops.pread(fd, want, cursor.offset)
            recs, end, damage = decode_many(
                data, cursor.offset, jf.header.salt, 0, max_body, limit=max_items - len(out)
            )
            for rec in recs:
                if isinstance(rec, Put) and rec.id >= cursor.next_id:
                    out.append(rec)
                    payload_bytes += len(rec.payload)
                    cursor = Cursor(jf.ms, rec.offset + rec.size, rec.id + 1)
                else:
                    cursor = Cursor(jf.ms, rec.offset + rec.size, cursor.next_id)
            if damage is None or (damage.incomplete and end > 0):
                continue
            if damage.incomplete and cursor.offset + len(data) < limit:
                # one record larger than our chunk: read exactly it
                hdr = fileio.ops.pread(fd, RECORD_HEADER_SIZE, cursor.offset)
                length = int.from_bytes(hdr[4:8], "little")
                data = fileio.ops.pread(fd, RECORD_HEADER_SIZE + length, cursor.offset)
                recs, end, damage = decode_many(data, cursor.offset, jf.header.salt, 0, max_body, limit=1)
                if recs:
                    continue  # re-read it through the normal path (rare)
            cursor = self._skip_damage(jf, fd, cursor, limit, damage)
        return out, cursor

    def _skip_damage(
        self, jf: JournalFile, fd: int, cursor: Cursor, limit: int, damage: Damage | None
    ) -> Cursor:
        reason = damage.reason if damage else "unknown"
        rest = fileio.ops.pread(fd, limit - cursor.offset, cursor.offset)
        max_body = self.config.max_item_size + PUT_OVERHEAD
        nxt = find_next_record(rest, 1, cursor.offset, jf.header.salt, cursor.next_id, max_body)
        if nxt is None:
            new = Cursor(jf.ms, limit, cursor.next_id)
            lost = limit - cursor.offset
        else:
            rec = decode_many(rest, cursor.offset, jf.header.salt, nxt, max_body, limit=1)[0][0]
            assert isinstance(rec, Put)
            new = Cursor(jf.ms, cursor.offset + nxt, rec.id)
            lost = nxt
        ids = (cursor.next_id, new.next_id - 1) if new.next_id > cursor.next_id else None
        event = RecoveryEvent(jf.path, cursor.offset, "skipped-damage", reason, lost, ids)
        with self._lock:
            if event not in self.recovery_report:
                self.recovery_report.append(event)
                log.warning(
                    "%s: damaged record at offset %d (%s): skipped %d bytes, ids lost %s",
                    jf.path, cursor.offset, reason, lost, ids,
                )
        return new

    def _first_add_ms(self, jf: JournalFile) -> int | None:
        recs, _ = self.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_bytes=1, max_items=1)
        return recs[0].add_ms if recs else None

    def locate_time(self, when_ms: int) -> int:
        """Id of the first item added at or after ``when_ms`` (``next_id`` if none).

        Binary search over the files by the add time of their first record (add times never
        decrease: the queue clamps them), then a scan inside the one file that can hold it.
        """
        with self._lock:
            files = list(self.files)
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
        while True:
            recs, cursor = self.read(cursor, max_items=4096)
            if not recs:
                return cursor.next_id
            for rec in recs:
                if rec.add_ms >= when_ms:
                    return rec.id

    def end_cursor(self) -> Cursor:
        """Cursor just past the last appended record."""
        with self._lock:
            jf = self.files[-1]
            return Cursor(jf.ms, jf.size + len(self._buf), self.next_id)

    # ----------------------------------------------------------------------------- archiving
    def archivable(self, min_head: int) -> list[JournalFile]:
        """Files whose every record has an id below ``min_head`` (never the active file)."""
        with self._lock:
            out = []
            for jf, nxt in zip(self.files, self.files[1:]):
                if nxt.first_id <= min_head:
                    out.append(jf)
                else:
                    break
            return out

    def archive(self, files: list[JournalFile], archive_dir: str | None) -> None:
        """Delete ``files`` (or move them into ``archive_dir``) and forget them."""
        for jf in files:
            with self._lock:
                if jf not in self.files[:-1]:
                    continue
                self.files.remove(jf)
                fd = self._read_fds.pop(jf.ms, None)
            if fd is not None:
                fileio.ops.close(fd)
            if archive_dir:
                fileio.ops.rename(jf.path, os.path.join(archive_dir, os.path.basename(jf.path)))
            else:
                fileio.ops.unlink(jf.path)
            log.info("archived journal file %s", jf.path)
        if files:
            fileio.ops.fsync_dir(self.directory)
            if archive_dir:
                fileio.ops.fsync_dir(archive_dir)

    # ----------------------------------------------------------------------------- closing
    def close(self) -> None:
        """Write out and fsync what is buffered (unless poisoned), then release every fd."""
        if self._closed:
            return
        try:
            if self._poisoned is None and self.config.sync != "never":
                self.sync()
            elif self._poisoned is None:
                self.write_out()
        finally:
            with self._lock:
                self._closed = True
                for fd in [self._fd, *self._retired_fds, *self._read_fds.values()]:
                    if fd >= 0:
                        try:
                            fileio.ops.close(fd)
                        except OSError:
                            pass
                self._fd = -1
                self._retired_fds.clear()
                self._read_fds.clear()
