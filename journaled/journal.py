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

from journaled import fileio, recovery
from journaled.config import MAX_ITEM_SIZE, QueueConfig, validate_name
from journaled.errors import CorruptJournal, InvalidName, JournalIOError, QueueClosed, UnsupportedVersion
from journaled.record import (
    HEADER_FIXED_SIZE,
    PUT_OVERHEAD,
    RECORD_HEADER_SIZE,
    Damage,
    FileHeader,
    Put,
    Skipped,
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
#: Largest record body any writer may produce.  Decoding is bounded by this, never by the
#: current ``max_item_size``: lowering that setting must not turn older, larger records into
#: "damage" (which recovery would cut).
MAX_RECORD_BODY = MAX_ITEM_SIZE + PUT_OVERHEAD


@attrs.frozen
class RecoveryEvent:
    """One thing recovery did: which file, where, what, how many bytes and ids were lost."""

    path: str
    offset: int
    action: str  # "truncated-tail", "cut-at-damage", "skipped-damage", "skipped-file"
    reason: str
    bytes_lost: int
    ids_lost: tuple[int, int] | None = None  # inclusive range, when known
    kept: str | None = None  # where the dropped bytes were saved (``*.damaged``), if anywhere


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
    first_add_ms: int | None = None  # add time of the first record, once read (locate_time)

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

    def __init__(self, directory: str, name: str, config: QueueConfig, id_floor: int = 1) -> None:
        """Open (recovering) or create the journal of queue ``name`` in ``directory``.

        ``id_floor``: ids below it have been handed out before (the queue derives it from its
        readers' checkpoints).  If recovery lost the journal's tail, or every file, new items
        still start at or above it, so an id is never given to two different items.
        """
        self._id_floor = id_floor
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
        # files retired under sync="never", not yet synced: by path, so that no fd stays open
        # per rotation (that would pin archived files' space and exhaust descriptors)
        self._unsynced_paths: list[str] = []
        self._appended = 0  # session byte sequence: appended / written out to the OS
        self._written = 0
        self._poisoned: JournalIOError | None = None
        self.last_add_ms = 0  # add times never go backwards (binary search relies on it)
        self._closed = False
        self.commits = GroupCommit(self._flush_for_sync)
        self._open()

    # ----------------------------------------------------------------------------- opening
    def _open(self) -> None:
        mode = self.config.recovery
        found = list_journal_files(self.directory, self.name)
        for k, (ms, path) in enumerate(found):
            try:
                with open(path, "rb") as f:
                    head = f.read(512)
                header = decode_header(head, path)
            except UnsupportedVersion:
                raise  # written by a newer format: refuse, never guess or set it aside
            except CorruptJournal as exc:
                size = os.path.getsize(path)
                # A newest file no longer than a header is a creation interrupted before its
                # first record: a torn tail, nothing in it was ever acknowledged.
                torn = k == len(found) - 1 and size <= HEADER_FIXED_SIZE + len(self.name) + 4
                if mode == "strict" or (mode == "tolerate_tail" and not torn):
                    raise CorruptJournal(path, exc.offset, f"{exc.reason} (recovery={mode!r})") from exc
                self._set_aside(path, exc.reason, size)
                continue
            self.files.append(JournalFile(path, ms, header, os.path.getsize(path)))
        if self.files:
            if mode in ("strict", "tolerate_tail"):
                # these modes promise to refuse damage up front, so every file is verified
                for jf in self.files[:-1]:
                    self._recover_file(jf, newest=False)
            self.next_id, skip_to = self._recover_file(self.files[-1], newest=True)
            if self._id_floor > max(skip_to, self.next_id):
                log.warning(
                    "%s: readers have seen ids up to %d but the journal ends at %d (lost tail); "
                    "new items start at %d", self.directory, self._id_floor - 1, self.next_id - 1,
                    self._id_floor,
                )
                skip_to = self._id_floor
            if skip_to > self.next_id:
                # ids of valid records cut off by point-in-time recovery are never reused
                self.next_id = skip_to
                self._create_file(now_ms())
            else:
                last = self.files[-1]
                self._fd = fileio.ops.open(last.path, os.O_WRONLY | os.O_APPEND, self.config.file_mode)
        else:
            self.next_id = max(1, self._id_floor)
            self._create_file(now_ms())

    def _set_aside(self, path: str, reason: str, size: int) -> None:
        """Move an unreadable file out of the journal, keeping its bytes for inspection."""
        self.recovery_report.append(
            RecoveryEvent(path, 0, "skipped-file", reason, size, kept=path + ".damaged")
        )
        log.warning("journal file %s is unreadable (%s); moved to %s.damaged", path, reason, path)
        fileio.ops.rename(path, path + ".damaged")
        fileio.ops.fsync_dir(self.directory)

    def _keep_aside(self, path: str, offset: int, data: bytes) -> str:
        """Save bytes cut from a journal file as ``<file>.at<offset>.damaged`` (durably, before
        the cut) so nothing recovery drops is gone for good."""
        kept = f"{path}.at{offset}.damaged"
        fileio.write_atomic(kept, data, self.config.file_mode)
        return kept

    def _recover_file(self, jf: JournalFile, newest: bool) -> tuple[int, int]:
        """Scan one file completely, apply the recovery mode (journaled/recovery.py) and index
        it.  Returns ``(next id after its last kept record, smallest id never used)``."""
        data = fileio.ops.read_file(jf.path)
        scan = recovery.scan_file(data, jf.header, MAX_RECORD_BODY)
        plan = recovery.plan(scan, self.config.recovery, jf.path, newest)
        expected = jf.first_id
        for item_id, offset, add_ms in scan.records:
            if offset >= plan.end:
                break
            jf.note(item_id, offset)
            expected = item_id + 1
            self.last_add_ms = max(self.last_add_ms, add_ms)
        for span in plan.skipped:
            assert span.resume is not None
            before = [r[0] for r in scan.records if r[1] < span.offset]
            after = [r[0] for r in scan.records if r[1] >= span.resume]
            lo = (before[-1] + 1) if before else jf.first_id
            lost = (lo, after[0] - 1) if after and after[0] > lo else None
            self.recovery_report.append(
                RecoveryEvent(
                    jf.path, span.offset, "skipped-damage", span.reason, span.resume - span.offset, lost
                )
            )
            log.warning(
                "%s: damaged bytes %d..%d skipped (%s); ids lost: %s",
                jf.path, span.offset, span.resume, span.reason, lost,
            )
        max_id = scan.max_id()
        skip_to = max(expected, (max_id or 0) + 1)
        if plan.cut is not None:
            cut = len(data) - plan.end
            tail = data[plan.end :]
            torn = recovery.is_torn_tail(plan.cut, data)
            lost = (expected, max_id) if max_id is not None and max_id >= expected else None
            kept = None if torn else self._keep_aside(jf.path, plan.end, tail)
            action = "truncated-tail" if torn else "cut-at-damage"
            self.recovery_report.append(
                RecoveryEvent(jf.path, plan.end, action, plan.cut.reason, cut, lost, kept=kept)
            )
            log.warning(
                "%s: cut %d bytes at offset %d (%s, recovery=%r); ids lost: %s; kept in %s",
                jf.path, cut, plan.end, plan.cut.reason, self.config.recovery, lost, kept,
            )
            fd = fileio.ops.open(jf.path, os.O_WRONLY, self.config.file_mode)
            try:
                fileio.ops.ftruncate(fd, plan.end)
                fileio.ops.fsync(fd)
            finally:
                fileio.ops.close(fd)
        jf.size = plan.end
        return expected, skip_to

    def _create_file(self, ms: int) -> None:
        """Start a new journal file whose first record will get id ``self.next_id``."""
        if self.files and ms <= self.files[-1].ms:
            ms = self.files[-1].ms + 1  # names must stay unique and sortable
        path = os.path.join(self.directory, f"{self.name}.{ms}")
        header = FileHeader(
            salt=secrets.randbits(32), first_id=self.next_id, created_ms=now_ms(), name=self.name
        )
        raw = encode_header(header)
        try:
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL
            fd = fileio.ops.open(path, flags, self.config.file_mode)
        except OSError as exc:
            # poison: after a failed rotation there is no file to append to (found by
            # tests/test_faults.py: ENOSPC at open used to escape put() as a bare OSError)
            raise self._poison(exc) from exc
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

    def append_one(self, payload: bytes, add_ms: int) -> tuple[int, int, int]:
        """``append([payload], add_ms, 0)`` for the plain single put, the hottest call of all
        (perf: no batch bookkeeping).  Anything unusual -- the record does not fit the current
        file, the journal is closed or poisoned -- is left to :meth:`append`."""
        with self._lock:
            jf = self.files[-1]
            buf = self._buf
            pos = jf.size + len(buf)
            size = PUT_OVERHEAD + len(payload)
            if pos + size <= self.config.journal_size and self._poisoned is None and not self._closed:
                if add_ms < self.last_add_ms:
                    add_ms = self.last_add_ms
                self.last_add_ms = add_ms
                item_id = self.next_id
                encode_puts(jf.header.salt, pos, item_id, add_ms, 0, (payload,), buf)
                if not jf.index_offsets or pos - jf.index_offsets[-1] >= INDEX_EVERY:
                    jf.note(item_id, pos)
                self.next_id = item_id + 1
                self._appended += size
                if len(buf) >= WRITE_OUT_AT or self.config.sync == "never":
                    self._write_out_locked()
                return item_id, add_ms, self._appended
        return self.append((payload,), add_ms, 0)

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
            jf = self.files[-1]
            pos = jf.size + len(self._buf)
            size = n * PUT_OVERHEAD + sum(map(len, payloads))
            if pos + size <= limit:
                # perf: the common case, everything fits the current file: one encode call, no
                # per-item loop here, and the sparse index is only visited when this batch can
                # reach the next INDEX_EVERY boundary (note() would add nothing otherwise).
                offs = encode_puts(jf.header.salt, pos, first_id, add_ms, expire_ms, payloads, self._buf)
                if not jf.index_offsets or pos + size - jf.index_offsets[-1] >= INDEX_EVERY:
                    for k in range(0, n, max(1, n // 8)):
                        jf.note(first_id + k, offs[k])
                self._appended += size
                self.next_id = first_id + n
                i = n
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
                    jf.header.salt, pos, self.next_id, add_ms, expire_ms,
                    payloads[i:j],
                    self._buf,
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
        else:
            self._unsynced_paths.append(self.files[-1].path)
            self._fd = -1
            try:
                fileio.ops.close(old)
            except OSError as exc:
                raise self._poison(exc) from exc
        self._fd = -1  # retired: never written or closed through _fd again, even if the next line fails
        self._create_file(now_ms())

    def _flush_for_sync(self) -> tuple[int, Callable[[], None]]:
        with self._lock:
            self._check_writable()
            self._write_out_locked()
            retired, self._retired_fds = self._retired_fds, []
            unsynced, self._unsynced_paths = self._unsynced_paths, []
            fd = self._fd
            target = self._written
        # Under "never" a rotation neither syncs the file it retires nor the directory entry of
        # the new one, so an explicit sync() must do both or it would claim too much.  (Such a
        # rotation is always followed by a record, so target > durable and fsync() does run.)
        for old in retired:
            fileio.ops.close(old)  # synced when it was retired

        def fsync() -> None:
            try:
                for path in unsynced:
                    try:
                        old = fileio.ops.open(path, os.O_RDONLY)
                    except FileNotFoundError:
                        continue  # archived since: every reader was done with it
                    try:
                        fileio.ops.fdatasync(old)
                    finally:
                        fileio.ops.close(old)
                if unsynced:
                    fileio.ops.fsync_dir(self.directory)
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
        if length > MAX_RECORD_BODY:
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
            over = next((k for k, r in enumerate(recs) if r.id >= item_id), None)
            if over is not None:
                # ids skipped by damage: more ids than records were passed, so the read went
                # beyond item_id; stop just before the first record at or after it
                if over == 0:
                    return cur
                recs, nxt = self.read(cur, max_items=over)
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
        """Read whole records from ``cursor`` onward (at least one if any exists), at most
        ``max_bytes`` of payload and ``max_items``; return them and the cursor after them.

        Damage met on the way is reported (``recovery_report``, a warning) and skipped: what
        lies after it and validates is still delivered.  Never returns a record that failed
        its CRC.
        """
        out: list[Put] = []
        payload_bytes = 0
        max_body = MAX_RECORD_BODY
        while len(out) < max_items and payload_bytes < max_bytes:
            relocate = False
            with self._lock:
                if self._closed:
                    raise QueueClosed("journal is closed")
                i = self._file_index(cursor.ms)
                if i < 0:
                    # The cursor's file was archived or set aside.  A cursor left exactly at its
                    # end (next_id == the next file's first id) is the common case: a reader
                    # whose last refill stopped at a file boundary, then committed past it.
                    jf = self.files[0]
                    if cursor.next_id <= jf.first_id:
                        cursor = Cursor(jf.ms, jf.header.size, jf.first_id)
                        continue
                    relocate = True  # ids beyond the oldest file's first: find them by id
                else:
                    jf = self.files[i]
                    last = i == len(self.files) - 1
                    if last and self._buf and cursor.offset >= jf.size:
                        self._write_out_locked()
                    limit = jf.size
                    fd = self._read_fd(jf)
            if relocate:
                cursor = self.locate(cursor.next_id)
                continue
            if cursor.offset >= limit:
                if last:
                    break
                nxt = self.files[i + 1]
                cursor = Cursor(nxt.ms, nxt.header.size, max(cursor.next_id, nxt.first_id))
                continue
            # perf: a small budget reads (and CRC-checks) a small window, not a whole chunk: a
            # reader with a small max_memory refills often and would otherwise decode ~1 MiB
            # to keep a few records.
            want = min(limit - cursor.offset, min(READ_CHUNK, max_bytes - payload_bytes) + 4096)
            data = fileio.ops.pread(fd, want, cursor.offset)
            recs, end, damage = decode_many(
                data, cursor.offset, jf.header.salt, 0, max_body, limit=max_items - len(out)
            )
            full = False
            if recs:
                # perf: one Cursor per chunk, not per record (same positions as before)
                next_id = cursor.next_id
                end_at = cursor.offset
                for rec in recs:
                    if isinstance(rec, Put) and rec.id >= next_id:
                        if out and payload_bytes + len(rec.payload) > max_bytes:
                            full = True  # never past max_bytes (but at least one record)
                            break
                        out.append(rec)
                        payload_bytes += len(rec.payload)
                        next_id = rec.id + 1
                    end_at = rec.offset + rec.size
                cursor = Cursor(jf.ms, end_at, next_id)
                self._learn_index(jf, recs)
            if full:
                break
            if damage is None or (damage.incomplete and end > 0):
                continue
            if damage.incomplete and cursor.offset + len(data) < limit:
                # one record larger than our chunk: read exactly it
                hdr = fileio.ops.pread(fd, RECORD_HEADER_SIZE, cursor.offset)
                length = int.from_bytes(hdr[4:8], "little")
                data = fileio.ops.pread(
                    fd, min(RECORD_HEADER_SIZE + length, limit - cursor.offset), cursor.offset
                )
                recs, end, damage = decode_many(data, cursor.offset, jf.header.salt, 0, max_body, limit=1)
                # Deliver it here: going round the loop would read the same too-small chunk
                # again, forever.
                for rec in recs:
                    if isinstance(rec, Put) and rec.id >= cursor.next_id:
                        out.append(rec)
                        payload_bytes += len(rec.payload)
                        cursor = Cursor(jf.ms, rec.offset + rec.size, rec.id + 1)
                    else:
                        cursor = Cursor(jf.ms, rec.offset + rec.size, cursor.next_id)
                if recs:
                    continue
            cursor = self._skip_damage(jf, fd, cursor, limit, damage)
        return out, cursor

    def _learn_index(self, jf: JournalFile, recs: Sequence[Put | Skipped]) -> None:
        """Add sparse-index points for records just read.  Files older than the newest have no
        index after a reopen (only the newest is scanned), and a reader's checkpoint takes its
        position hint from the index: without this, a reopened reader would scan its head's
        file from the start."""
        last = jf.index_offsets[-1] if jf.index_offsets else -INDEX_EVERY
        if recs[-1].offset - last < INDEX_EVERY:
            return  # nothing new here (also when the index already reaches further)
        with self._lock:
            for rec in recs:
                if isinstance(rec, Put):
                    jf.note(rec.id, rec.offset)

    def _skip_damage(
        self, jf: JournalFile, fd: int, cursor: Cursor, limit: int, damage: Damage | None
    ) -> Cursor:
        reason = damage.reason if damage else "unknown"
        mode = self.config.recovery
        if mode in ("strict", "tolerate_tail"):
            # every file was verified at open: this is damage that appeared since
            raise CorruptJournal(jf.path, cursor.offset, f"{reason} (recovery={mode!r})")
        rest = fileio.ops.pread(fd, limit - cursor.offset, cursor.offset)
        if mode == "point_in_time":
            with self._lock:
                i = self._file_index(jf.ms)
                if 0 <= i < len(self.files) - 1:
                    return self._cut_older_locked(jf, i, cursor, rest, reason, damage)
        max_body = MAX_RECORD_BODY
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

    def _cut_older_locked(
        self, jf: JournalFile, i: int, cursor: Cursor, rest: bytes, reason: str, damage: Damage | None
    ) -> Cursor:
        """Point-in-time recovery met damage in an older file (those are verified lazily, when
        first read): the file ends here for every reader; the rest is kept aside once."""
        if jf.size > cursor.offset:
            torn = (damage is not None and damage.incomplete) or not any(rest)
            kept = None if torn else self._keep_aside(jf.path, cursor.offset, rest)
            nxt_first = self.files[i + 1].first_id
            ids = (cursor.next_id, nxt_first - 1) if nxt_first > cursor.next_id else None
            self.recovery_report.append(
                RecoveryEvent(jf.path, cursor.offset, "cut-at-damage", reason, len(rest), ids, kept=kept)
            )
            log.warning(
                "%s: damaged record at offset %d (%s): file ends here (point_in_time), %d bytes "
                "kept in %s, ids lost %s",
                jf.path, cursor.offset, reason, len(rest), kept, ids,
            )
            jf.size = cursor.offset
        return Cursor(jf.ms, cursor.offset, cursor.next_id)

    def _first_add_ms(self, jf: JournalFile) -> int | None:
        if jf.first_add_ms is not None:
            return jf.first_add_ms  # a file's first record never changes: read it once
        recs, _ = self.read(Cursor(jf.ms, jf.header.size, jf.first_id), max_bytes=1, max_items=1)
        if not recs:
            return None
        jf.first_add_ms = recs[0].add_ms
        return jf.first_add_ms

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
        # ids are consecutive: bound each read to this file, so the scan never runs on into the
        # files after it (one record of the next file at most, when the answer is its first)
        end_id = files[i + 1].first_id if i + 1 < len(files) else None
        while True:
            want = 4096 if end_id is None else max(1, min(4096, end_id - cursor.next_id))
            recs, cursor = self.read(cursor, max_items=want)
            if not recs:
                return cursor.next_id
            for rec in recs:
                if rec.add_ms >= when_ms:
                    return rec.id

    def _file_of(self, item_id: int) -> int:
        """Index of the file that holds (or would hold) ``item_id``; caller holds the lock."""
        return max(0, bisect.bisect_right(self.files, item_id, key=lambda f: f.first_id) - 1)

    def file_created_s(self, item_id: int) -> float:
        """Creation time (epoch seconds) of the file holding ``item_id``: no item in it is
        older, so it bounds the age of ``item_id`` from above without any I/O."""
        with self._lock:
            return self.files[self._file_of(item_id)].header.created_ms / 1000.0

    def disk_usage(self) -> tuple[int, int]:
        """``(files, bytes)`` of the journal, buffered bytes included; from memory, no I/O."""
        with self._lock:
            return len(self.files), sum(f.size for f in self.files) + len(self._buf)

    def bytes_from(self, item_id: int, hint_ms: int = 0, hint_offset: int = 0) -> int:
        """Journal bytes from the record of ``item_id`` to the end, from memory only: exact when
        ``(hint_ms, hint_offset)`` is that record's position, else counted from the nearest known
        position before it (sparse index, or the start of its file): never an under-estimate."""
        with self._lock:
            i = self._file_of(item_id)
            jf = self.files[i]
            k = bisect.bisect_right(jf.index_ids, item_id) - 1
            pos = jf.index_offsets[k] if k >= 0 else jf.header.size
            if hint_ms == jf.ms and pos <= hint_offset <= jf.size:
                pos = hint_offset
            total = max(0, jf.size - pos) + len(self._buf)
            for f in self.files[i + 1 :]:
                total += f.size - f.header.size
            return total

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


_ANY_JOURNAL_RE = re.compile(r"(.+)\.(\d{1,20})")


def detect_queue_name(directory: str) -> str:
    """The queue name of an existing directory (from its journal files), else its basename
    (or ``queue`` when the basename is not a valid name)."""
    names = set()
    for entry in os.listdir(directory):
        m = _ANY_JOURNAL_RE.fullmatch(entry)
        if m and not entry.startswith("."):
            names.add(m.group(1))
    # a reader named with digits only ("<queue>.read.7") looks like a journal of "<queue>.read"
    names = {n for n in names if not any(n.startswith(m + ".read.") or n == m + ".read" for m in names)}
    valid = []
    for n in names:
        try:
            valid.append(validate_name(n))
        except InvalidName:
            pass
    if len(valid) == 1:
        return valid[0]
    if len(valid) > 1:
        raise InvalidName(f"{directory!r} holds journals of several queues {sorted(valid)}; pass name=")
    base = os.path.basename(os.path.abspath(directory))
    try:
        return validate_name(base, "queue name")
    except InvalidName:
        return "queue"
