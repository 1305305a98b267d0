"""The journal's writer: encode PUT records into a buffer, write it out, rotate files, sync.

Only the newest file is written.  Appends encode into an in-memory buffer under the journal lock
(format/record.py does the bytes); the buffer is handed to the OS at once under ``sync="never"``, past
``WRITE_OUT_AT`` bytes, on a rotation, or when a sync asks.  Durability waits go through
:class:`~journaled.disk.groupcommit.GroupCommit`, so no fsync runs under the journal lock on the hot path:
the sync takes, under the lock, a reference to the file it will fsync (a
:class:`~journaled.log.state.SharedFd`), so a rotation that retires the file meanwhile closes its
descriptor only after the fsync: never a closed or reused descriptor.

Every method named ``*_locked`` must be called with ``LogState.lock`` held.

**Home.**  The writer records the identity (device, inode) of the queue directory when it opens.
:meth:`Writer.check_home` (called on the maintenance tick, never per put) and every file creation
compare it again, and ``fstat`` the file being written: a directory removed, renamed or replaced,
or a current file without any name left (``st_nlink == 0``), poisons the journal with
:class:`~journaled.errors.QueueDirectoryGone`, so nothing more goes into unnamed files or into
whatever directory now sits at the path.

**A new file is opened before anything depends on it.**  An append that will rotate creates the
files it rotates into (:meth:`Writer.reserve_locked`) before it encodes a record, and a rotation
opens its new file before it retires the old one.  A failed ``open`` (EMFILE, ENFILE, ENOMEM,
EACCES, ...) therefore loses nothing: the append raises :class:`~journaled.errors.JournalIOError`
with the open's errno, none of its records was written or took an id, the current file stays the
one appended to, and the journal is *not* poisoned (only a failed write or fdatasync poisons it).
The spool adopter reserves the files of a whole batch before it writes its intent line, so an
adoption that fails this way has nothing in the journal either.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
from collections.abc import Callable, Sequence
from typing import Final, Protocol

from journaled.disk import fileio
from journaled.disk.groupcommit import GroupCommit
from journaled.disk.layout import journal_path
from journaled.errors import JournalIOError, QueueDirectoryGone
from journaled.format.metadata import Meta
from journaled.format.metadata import encode as encode_meta
from journaled.format.record import MAX_UNIT_RAW, PUT_OVERHEAD, FileHeader, encode_header, header_size
from journaled.format.speedups import encode_puts, encode_putx
from journaled.log.runs import append_run, cut_run, run_ends
from journaled.log.state import INDEX_EVERY, JournalFile, LogState, SharedFd, now_ms

#: Under a periodic policy the buffer is handed to the OS once it grows past this.
WRITE_OUT_AT: Final = 1024 * 1024  # Final: a constant in the compiled appends
#: Names tried for a new journal file when the next one is taken (a planted file, a FIFO).
NAME_TRIES = 16


class SaltSource(Protocol):
    """Where new journal files' salts come from: ``randbits(32)``, as the ``secrets`` module's."""

    def randbits(self, k: int) -> int: ...


#: The salt source a writer made from now on uses (the ``secrets`` module; read when the writer is
#: made, so a test that replays a run sets it before opening a queue: compiled code calls the
#: source it was given, never a patched module global).
SALTS: SaltSource = secrets


class Writer:
    """Appends to the newest journal file of ``state`` (one per open journal)."""

    def __init__(self, state: LogState) -> None:
        self.state = state
        self.salts = SALTS
        self.buf = bytearray()
        self.out: SharedFd | None = None  # the newest file, open for appending
        # files retired under sync="never", not yet synced: by path, so that no fd stays open
        # per rotation (that would pin archived files' space and exhaust descriptors)
        self.unsynced_paths: list[str] = []
        # files created for the next rotations and not started yet: (ms, path, fd), oldest first
        self.spare: list[tuple[int, str, int]] = []
        self.appended = 0  # session byte sequence: appended / written out to the OS
        self.written = 0
        self.commits = GroupCommit(self._flush_for_sync)
        # perf: the frozen config's two answers every append needs, one attribute away
        self.limit = state.config.journal_size
        self.write_through = state.config.sync == "never"  # no buffering: every append is written out
        # batches of two or more items go into compressed units (the queue's stored compression,
        # set_compression by the owner after opening; docs/design.md "Compressed journals")
        self.compress = False
        home = os.stat(state.directory)
        self.home = (home.st_dev, home.st_ino)  # the directory's identity (see "Home" above)

    # ----------------------------------------------------------------------------- home
    def _home_problem(self) -> tuple[str, int] | None:
        """What is wrong with the directory at our path, if anything (a stat, no lock)."""
        path = self.state.directory
        try:
            now = os.stat(path)
        except (FileNotFoundError, NotADirectoryError):
            return f"queue directory {path!r} was removed or renamed", errno.ENOENT
        if (now.st_dev, now.st_ino) != self.home:
            return f"queue directory {path!r} was replaced by another directory", errno.ESTALE
        return None

    def check_home(self) -> None:
        """Raise :class:`QueueDirectoryGone` (and refuse writes from now on) if the directory or
        the journal file being written was removed or replaced.  Two cheap syscalls; the
        maintenance thread calls it every tick."""
        st = self.state
        if isinstance(st.poisoned, QueueDirectoryGone):
            raise st.poisoned
        problem = self._home_problem()  # first: "directory removed" says more than "file removed"
        with st.lock:
            if problem is not None:
                raise st.mark_gone(*problem)
            out = self.out
            if st.closed or out is None or out.fd < 0:
                return
            if os.fstat(out.fd).st_nlink == 0:
                raise st.mark_gone(f"journal file {st.files[-1].path!r} was removed", errno.ENOENT)

    @property
    def gone(self) -> bool:
        """The directory or the current file was found removed or replaced."""
        return isinstance(self.state.poisoned, QueueDirectoryGone)

    # ----------------------------------------------------------------------------- files
    def continue_file(self, jf: JournalFile) -> None:
        """Append to an existing (recovered) file from now on.  Called before any append.

        Under ``sync="always"`` the file is synced first: a previous owner killed before its
        fsync left records only in the page cache, and this owner answers for them (a client's
        retried put is told its ids from them; a reader delivers them), so they must be as
        durable as anything it acknowledges.  Older files were synced when they were rotated."""
        self.out = SharedFd(fileio.ops.open(jf.path, os.O_WRONLY | os.O_APPEND, self.state.config.file_mode))
        if self.state.config.sync == "always":
            try:
                fileio.ops.fdatasync(self.out.fd)
            except OSError as exc:
                raise JournalIOError(
                    exc.errno,
                    f"could not sync the newest journal file at open ({exc.strerror or exc}); the "
                    "queue was not opened and nothing in it changed",
                    jf.path,
                ) from exc

    def create_file_locked(self, ms: int) -> None:
        """Start a new journal file whose first record will get id ``state.next_id``."""
        self._start_file_locked(self._open_new_locked(ms))

    def _open_new_locked(self, ms: int) -> tuple[int, str, int]:
        """Create an empty journal file named ``ms`` or later; ``(ms, path, fd)``.  A failed
        open raises :class:`JournalIOError` and poisons nothing: nothing was written."""
        st = self.state
        newest = self.spare[-1][0] if self.spare else (st.files[-1].ms if st.files else 0)
        ms = max(ms, newest + 1)  # names must stay unique and sortable
        problem = self._home_problem()  # never start a file in somebody else's directory
        if problem is not None:
            raise st.mark_gone(*problem)
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL
        for _ in range(NAME_TRIES):
            path = journal_path(st.directory, st.name, ms)
            try:
                return ms, path, fileio.ops.open(path, flags, st.config.file_mode)
            except FileExistsError:
                ms += 1  # a name taken by a file that is not ours: it is never touched
            except OSError as exc:
                raise _open_failed(exc, path) from exc
        taken = FileExistsError(errno.EEXIST, os.strerror(errno.EEXIST), path)
        raise _open_failed(taken, path) from taken

    def _start_file_locked(self, new: tuple[int, str, int]) -> None:
        """Write the header of the created file ``new`` and make it the one appended to."""
        st = self.state
        ms, path, fd = new
        header = FileHeader(
            salt=self.salts.randbits(32), first_id=st.next_id, created_ms=now_ms(), name=st.name
        )
        raw = encode_header(header)
        try:
            fileio.ops.write(fd, raw)
            if st.config.sync != "never":
                fileio.ops.fdatasync(fd)
                fileio.ops.fsync_dir(st.directory)
        except OSError as exc:
            fileio.ops.close(fd)
            raise st.poison(exc) from exc
        self.out = SharedFd(fd)
        jf = JournalFile(path, ms, header, len(raw))
        jf.note(st.next_id, len(raw))
        st.add_file(jf)

    def files_needed(self, sizes: Sequence[int]) -> int:
        """How many new files appending payloads of ``sizes`` (in order, from the current end)
        rotates into: the packing of :meth:`append`.  Caller holds the lock."""
        st = self.state
        jf = st.files[-1]
        hdr = jf.header.size  # the current file's, then a new file's
        end = jf.size + len(self.buf)
        limit = self.limit
        k = 0
        for n in sizes:
            rec = PUT_OVERHEAD + n
            if end + rec > limit and end > hdr:
                k += 1
                hdr = end = header_size(st.name)
            end += rec
        return k

    def reserve_locked(self, sizes: Sequence[int]) -> None:
        """Create every file an append of payloads of ``sizes`` rotates into, before anything of
        it is encoded (see "A new file is opened before anything depends on it" above)."""
        need = self.files_needed(sizes)
        while len(self.spare) < need:
            self.spare.append(self._open_new_locked(now_ms()))

    def reserve(self, sizes: Sequence[int]) -> None:
        """:meth:`reserve_locked` under the lock; raises if the journal refuses writes."""
        with self.state.lock:
            self.state.check_writable()
            self.reserve_locked(sizes)

    # ----------------------------------------------------------------------------- appending
    def append_one(self, payload: bytes, add_ms: int) -> tuple[int, int, int]:
        """``append([payload], add_ms, 0)`` for the plain single put, the hottest call of all
        (perf: no batch bookkeeping).  Anything unusual -- the record does not fit the current
        file, the journal is closed or poisoned -- is left to :meth:`append`."""
        st = self.state
        with st.lock:
            jf = st.files[-1]
            buf = self.buf
            pos = jf.size + len(buf)
            size = PUT_OVERHEAD + len(payload)
            if pos + size <= self.limit and st.poisoned is None and not st.closed:
                if add_ms < st.last_add_ms:
                    add_ms = st.last_add_ms
                item_id = st.next_id
                encode_puts(jf.salt, pos, item_id, add_ms, 0, (payload,), buf)
                return self._appended_one_locked(jf, item_id, pos, size, add_ms)
        return self.append((payload,), add_ms, 0)

    def _appended_one_locked(
        self, jf: JournalFile, item_id: int, pos: int, size: int, add_ms: int
    ) -> tuple[int, int, int]:
        """The rest of a one-item append whose record (``size`` bytes at ``pos`` of ``jf``) is in
        the buffer: the sparse index, the state, the write-out; what the append returns."""
        if not jf.index_offsets or pos - jf.index_offsets[-1] >= INDEX_EVERY:
            jf.note(item_id, pos)
        self.state.appended(item_id + 1, add_ms)
        self.appended += size
        if self.write_through or len(self.buf) >= WRITE_OUT_AT:
            self.write_out_locked()
        return item_id, add_ms, self.appended

    def append(self, payloads: Sequence[bytes], add_ms: int, expire_ms: int) -> tuple[int, int, int]:
        """Append PUT records; return ``(first_id, add_ms, seq)``.

        ``add_ms`` is the add time actually recorded (never earlier than a previous one).
        ``seq`` is the byte sequence number to pass to ``wait_durable``.  Items are never split
        across files: a record that would pass ``journal_size`` goes to a fresh file.
        """
        if self.compress and len(payloads) > 1:
            return self._append_units(payloads, None, None, add_ms, expire_ms)
        st = self.state
        with st.lock:
            st.check_writable()
            add_ms = max(add_ms, st.last_add_ms)
            first_id = st.next_id
            limit = self.limit
            i = 0
            n = len(payloads)
            jf = st.files[-1]
            pos = jf.size + len(self.buf)
            size = n * PUT_OVERHEAD + sum(map(len, payloads))
            if pos + size > limit:
                self.reserve_locked(list(map(len, payloads)))  # may raise: nothing encoded yet
            if pos + size <= limit:
                # perf: everything fits the current file: one encode call, and the sparse index
                # is only visited when this batch can reach the next INDEX_EVERY boundary
                offs = encode_puts(jf.salt, pos, first_id, add_ms, expire_ms, payloads, self.buf)
                if not jf.index_offsets or pos + size - jf.index_offsets[-1] >= INDEX_EVERY:
                    for k in range(0, n, max(1, n // 8)):
                        jf.note(first_id + k, offs[k])
                self.appended += size
                st.appended(first_id + n, add_ms)
                i = n
            while i < n:
                jf = st.files[-1]
                pos = jf.size + len(self.buf)
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
                    self.rotate_locked()
                    continue
                before = len(self.buf)
                offs = encode_puts(jf.salt, pos, st.next_id, add_ms, expire_ms, payloads[i:j], self.buf)
                for k in range(0, j - i, max(1, (j - i) // 8)):
                    jf.note(st.next_id + k, offs[k])
                self.appended += len(self.buf) - before
                st.appended(st.next_id + j - i, add_ms)
                i = j
            if self.write_through or len(self.buf) >= WRITE_OUT_AT:
                self.write_out_locked()
            return first_id, add_ms, self.appended

    def append_putx_one(
        self, payload: bytes, meta: Meta, enc: bytes, add_ms: int, expire_ms: int
    ) -> tuple[int, int, int]:
        """``append_meta((payload,), (meta,), add_ms, expire_ms, (enc,))`` without the tuples (perf), as
        :meth:`append_one` for a plain put; anything unusual (no room, closed, poisoned) takes that."""
        st = self.state
        with st.lock:
            jf = st.files[-1]
            buf = self.buf
            pos = jf.size + len(buf)
            size = PUT_OVERHEAD + len(payload) + len(enc)
            if pos + size <= self.limit and st.poisoned is None and not st.closed:
                if add_ms < st.last_add_ms:
                    add_ms = st.last_add_ms
                item_id = st.next_id
                encode_putx(jf.salt, pos, item_id, add_ms, expire_ms, enc, payload, buf)
                return self._appended_one_locked(jf, item_id, pos, size, add_ms)
        return self.append_meta((payload,), (meta,), add_ms, expire_ms, (enc,))

    def append_meta(
        self,
        payloads: Sequence[bytes],
        metas: Sequence[Meta | None],
        add_ms: int,
        expire_ms: int,
        encoded: Sequence[bytes] | None = None,
    ) -> tuple[int, int, int]:
        """:meth:`append` for items of which some carry metadata (``metas[i]``, None for a plain
        PUT): a PUTX record each, encoded one by one (the plain batch path stays as it is).
        ``encoded[i]``, when given, is ``metadata.encode(metas[i])`` (anything for a None), which
        the caller may have made already to check the record's size: it is not made twice."""
        st = self.state
        if encoded is None:
            encoded = [b"" if m is None else encode_meta(m) for m in metas]
        if self.compress and len(payloads) > 1:
            return self._append_units(payloads, metas, encoded, add_ms, expire_ms)
        with st.lock:
            st.check_writable()
            add_ms = max(add_ms, st.last_add_ms)
            first_id = st.next_id
            # a PUTX is a PUT whose payload is longer by its metadata, for the room it takes
            sizes = [
                len(p) + (0 if m is None else len(e))
                for p, m, e in zip(payloads, metas, encoded, strict=True)
            ]
            jf = st.files[-1]
            if jf.size + len(self.buf) + len(sizes) * PUT_OVERHEAD + sum(sizes) > self.limit:
                self.reserve_locked(sizes)  # may raise: nothing encoded yet
            for payload, meta, enc, size in zip(payloads, metas, encoded, sizes):
                jf = st.files[-1]
                pos = jf.size + len(self.buf)
                if pos + PUT_OVERHEAD + size > self.limit and pos > jf.header.size:
                    self.rotate_locked()
                    jf = st.files[-1]
                    pos = jf.size + len(self.buf)
                item_id = st.next_id
                if meta is None:
                    encode_puts(jf.salt, pos, item_id, add_ms, expire_ms, (payload,), self.buf)
                else:
                    encode_putx(jf.salt, pos, item_id, add_ms, expire_ms, enc, payload, self.buf)
                if not jf.index_offsets or pos - jf.index_offsets[-1] >= INDEX_EVERY:
                    jf.note(item_id, pos)
                self.appended += PUT_OVERHEAD + size
                st.appended(item_id + 1, add_ms)
            if self.write_through or len(self.buf) >= WRITE_OUT_AT:
                self.write_out_locked()
            return first_id, add_ms, self.appended

    def set_compression(self, on: bool) -> None:
        """Write batches of two or more items as compressed units from now on (or not)."""
        self.compress = on

    def _append_units(
        self,
        payloads: Sequence[bytes],
        metas: Sequence[Meta | None] | None,
        encoded: Sequence[bytes] | None,
        add_ms: int,
        expire_ms: int,
    ) -> tuple[int, int, int]:
        """:meth:`append` / :meth:`append_meta` in a compressed queue: the items go in runs of at
        most ``MAX_UNIT_RAW`` inner bytes, each written as one PUTZ record, or as the plain records
        when compressing does not make it smaller (a run of one, an item over the cap, or bytes
        that do not compress).  Runs never cross a file: a run takes the room of its plain
        records, which its unit never exceeds."""
        st = self.state
        if encoded is None:
            sizes: Sequence[int] | None = None
            total = sum(map(len, payloads))
        else:
            sizes = [len(p) + len(e) for p, e in zip(payloads, encoded, strict=True)]
            total = sum(sizes)
        n = len(payloads)
        total += n * PUT_OVERHEAD
        with st.lock:
            st.check_writable()
            add_ms = max(add_ms, st.last_add_ms)
            first_id = st.next_id
            jf = st.files[-1]
            pos = jf.size + len(self.buf)
            if total <= MAX_UNIT_RAW and pos + total <= self.limit:
                # perf: the common case, the whole batch is one run in the current file: no
                # cutting at all
                self._append_run_locked(jf, pos, payloads, metas, encoded, 0, n, total, add_ms, expire_ms)
            else:
                if sizes is None:
                    sizes = list(map(len, payloads))
                if pos + total > self.limit:
                    self.reserve_locked(sizes)  # may raise: nothing encoded yet
                ends = run_ends(sizes)
                i = 0
                while i < n:
                    jf = st.files[-1]
                    pos = jf.size + len(self.buf)
                    j = cut_run(ends, i, self.limit - pos, pos <= jf.header.size)
                    if j == i:
                        self.rotate_locked()
                        continue
                    raw = ends[j - 1] - (ends[i - 1] if i else 0)
                    self._append_run_locked(jf, pos, payloads, metas, encoded, i, j, raw, add_ms, expire_ms)
                    i = j
            if self.write_through or len(self.buf) >= WRITE_OUT_AT:
                self.write_out_locked()
            return first_id, add_ms, self.appended

    def _append_run_locked(
        self,
        jf: JournalFile,
        pos: int,
        payloads: Sequence[bytes],
        metas: Sequence[Meta | None] | None,
        encoded: Sequence[bytes] | None,
        i: int,
        j: int,
        raw: int,
        add_ms: int,
        expire_ms: int,
    ) -> None:
        """Append items ``i .. j-1`` (``raw`` bytes as plain records) at ``pos`` of ``jf``, the
        current file, as :func:`~journaled.log.runs.append_run` writes them."""
        st = self.state
        item_id, before = st.next_id, len(self.buf)
        append_run(self.buf, jf.salt, pos, item_id, payloads, metas, encoded, i, j, raw, add_ms, expire_ms)
        if not jf.index_offsets or pos - jf.index_offsets[-1] >= INDEX_EVERY:
            jf.note(item_id, pos)  # a unit's items stand where the unit stands
        self.appended += len(self.buf) - before
        st.appended(item_id + j - i, add_ms)

    def write_out_locked(self) -> None:
        """Hand the buffer to the OS."""
        if not self.buf:
            return
        try:
            assert self.out is not None
            fileio.ops.write(self.out.fd, self.buf)
        except OSError as exc:
            # A partial write may have reached the file; the owner cuts it on reopen.
            raise self.state.poison(exc) from exc
        n = len(self.buf)
        self.state.wrote_out(n)
        self.written += n
        self.buf = bytearray()

    def rotate_locked(self) -> None:
        """Retire the newest file (synced first unless ``sync="never"``) and start a new one
        (one :meth:`reserve_locked` created, else opened first: a failed open changes nothing)."""
        st = self.state
        if not self.spare:
            self.spare.append(self._open_new_locked(now_ms()))
        problem = self._home_problem()
        if problem is not None:
            raise st.mark_gone(*problem)
        self.write_out_locked()
        old, self.out = self.out, None  # never written through again, even if what follows fails
        assert old is not None
        try:
            if st.config.sync != "never":
                fileio.ops.fdatasync(old.fd)
                self.commits.mark_durable(self.written)
            else:
                self.unsynced_paths.append(st.files[-1].path)
        except OSError as exc:
            raise st.poison(exc) from exc
        finally:
            old.retire()  # closed now, or by the sync still using it
        self._start_file_locked(self.spare.pop(0))

    def write_out(self) -> None:
        """Hand buffered bytes to the OS (no fsync): makes them visible to other processes."""
        with self.state.lock:
            if not self.state.closed:
                self.write_out_locked()

    # ----------------------------------------------------------------------------- syncing
    def _flush_for_sync(self) -> tuple[int, Callable[[bool], None]]:
        st = self.state
        with st.lock:
            st.check_writable()
            self.write_out_locked()
            unsynced, self.unsynced_paths = self.unsynced_paths, []
            out = self.out
            assert out is not None
            fd = out.acquire()  # a rotation may retire it while we fsync outside the lock
            target = self.written

        def fsync(needed: bool) -> None:
            # Under "never" a rotation neither syncs the file it retires nor the directory entry
            # of the new one, so an explicit sync() must do both or it would claim too much.
            try:
                for k, path in enumerate(unsynced):
                    try:
                        old = fileio.ops.open(path, os.O_RDONLY)
                    except FileNotFoundError:
                        continue  # archived since: every reader was done with it
                    except OSError as exc:
                        # nothing failed to reach the disk: a later sync tries these files again
                        with st.lock:
                            self.unsynced_paths[:0] = unsynced[k:]
                        failed = _open_failed_for_sync(exc, path)
                        failed.__cause__ = exc  # as below
                        raise failed from exc
                    try:
                        fileio.ops.fdatasync(old)
                    finally:
                        fileio.ops.close(old)
                if unsynced:
                    fileio.ops.fsync_dir(st.directory)
                if needed:
                    fileio.ops.fdatasync(fd)
            except JournalIOError:
                raise
            except OSError as exc:
                err = st.poison(exc)
                err.__cause__ = exc  # said outright: compiled by mypyc, this closure's `from exc` is lost
                raise err from exc
            finally:
                with st.lock:
                    out.release()

        return target, fsync

    def sync(self) -> None:
        """Make everything appended so far durable.  Raises :class:`QueueDirectoryGone` once the
        directory is gone, even with nothing to write: "durable" would be a false claim then."""
        if self.gone:
            self.state.check_writable()
        self.commits.wait_durable(self.appended)

    @property
    def dirty(self) -> bool:
        return self.commits.durable < self.appended

    def close_locked(self, discard_spares: bool = True) -> None:
        """Release the write descriptor (after a final write out / sync) and those of files
        created for rotations that did not come; those files are removed unless
        ``discard_spares`` is False (a forked child: they are its parent's)."""
        out, self.out = self.out, None
        if out is not None:
            out.retire()
        spare, self.spare = self.spare, []
        for _ms, path, fd in spare:
            with contextlib.suppress(OSError):
                fileio.ops.close(fd)
            if discard_spares:
                with contextlib.suppress(OSError):
                    fileio.ops.unlink(path)


def _open_failed(exc: OSError, path: str) -> JournalIOError:
    """The error of an append whose new journal file could not be opened: nothing was
    written, and the journal is not poisoned (the put can be retried)."""
    return JournalIOError(
        exc.errno,
        f"could not create a new journal file ({exc.strerror or exc}); nothing was written and "
        "the queue still accepts writes: retry the put",
        path,
    )


def _open_failed_for_sync(exc: OSError, path: str) -> JournalIOError:
    """The error of a sync that could not open a retired file to fsync it: nothing is claimed
    durable, nothing is lost, and the journal is not poisoned (a later sync tries again)."""
    return JournalIOError(
        exc.errno,
        f"could not open a journal file to sync it ({exc.strerror or exc}); nothing is claimed "
        "durable and the queue still accepts writes: retry the sync",
        path,
    )
