"""What the parts of the journal share: the list of files, the next id, and the journal lock.

The journal (log/journal.py) is a facade over parts that each do one job on this state: the writer
(log/writer.py: append, rotate, write out, sync), opening (log/opening.py: recovery at open), reading
(log/cursors.py: records by cursor, damage met while reading), positions (log/positions.py: ids and times
to files and offsets) and retention (log/retention.py: archiving).

Ownership: only this module changes that state.  The parts read the attributes of
:class:`LogState` and :class:`JournalFile` freely, and change them through the narrow methods
below, each of which says what happened (``opened``, ``appended``, ``wrote_out``, ``add_file``,
``forget_file``, ``reinstate_file``, ``report``, ``poison``, ``mark_gone``, ``close``; on a file:
``note``, ``end_at``, ``cache_first_add_ms``) and under which lock it runs.

Locking: every attribute of :class:`LogState` and of each :class:`JournalFile` is guarded by
``LogState.lock``, *the journal lock*.  It is taken after the queue lock, never before it, and
nothing waits on I/O while holding it except the writer's ``write()`` of its buffer and a
rotation (which happen under it by design: they order the bytes).  A file descriptor is used
outside the lock only by a holder of a reference to it (:class:`SharedFd`), so no thread can
close a descriptor another is using.
"""

from __future__ import annotations

import bisect
import os
import threading
import time
from collections import OrderedDict
from typing import Final, Protocol

import attrs

from journaled.config import QueueConfig
from journaled.disk import fileio
from journaled.errors import JournalIOError, QueueClosed, QueueDirectoryGone
from journaled.format.record import FileHeader

#: One sparse index entry (id, offset) per this many bytes of journal: bounds the in-file scan
#: when locating an id to ~64 KiB of reading.
INDEX_EVERY: Final = 64 * 1024
#: Most read descriptors the journal keeps open between reads, shared by all readers (the least
#: recently used is closed first): open files stay bounded however many journal files there are.
READ_FDS: Final = 8


class WallClock(Protocol):
    """Where the journal's times come from: ``time()`` and ``time_ns()``, as the ``time`` module's."""

    def time(self) -> float: ...

    def time_ns(self) -> int: ...


#: The clock :func:`now_ms` and the poisoning times read (the ``time`` module).  A module attribute
#: read at each call, so a test gives the journal its clock by setting it: this module is compiled
#: by mypyc, which does not see a patched ``time`` import.
CLOCK: WallClock = time


def now_ms() -> int:
    """The wall-clock time in ms (journal file names, file headers' creation times)."""
    return CLOCK.time_ns() // 1_000_000


@attrs.frozen
class RecoveryEvent:
    """One thing recovery did: which file, where, what, how many bytes and ids were lost."""

    path: str
    offset: int
    action: str  # "truncated-tail", "cut-at-damage", "skipped-damage", "skipped-file", "recovered-header"
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


class JournalFile:
    """What the journal knows about one file without reading all of it.

    A plain class (not attrs): compiled by mypyc with the writer, its fields are a C struct's, read
    on every append (docs/design.md, "The compiled hot path").  Compared by identity."""

    def __init__(self, path: str, ms: int, header: FileHeader, size: int) -> None:
        self.path = path
        self.ms = ms
        self.header = header
        #: ``header.salt``, one native field away (perf: every append's record CRC uses it)
        self.salt: int = header.salt
        self.size = size  # bytes on disk that hold valid records (for the active file: written so far)
        self.index_ids: list[int] = []
        self.index_offsets: list[int] = []
        self.first_add_ms: int | None = None  # add time of the first record, once read (locate_time)

    def __repr__(self) -> str:
        return (
            f"JournalFile(path={self.path!r}, ms={self.ms!r}, header={self.header!r}, size={self.size!r}, "
            f"index_ids={self.index_ids!r}, index_offsets={self.index_offsets!r}, "
            f"first_add_ms={self.first_add_ms!r})"
        )

    @property
    def first_id(self) -> int:
        return self.header.first_id

    def note(self, item_id: int, offset: int) -> None:
        """Add a sparse-index point (the record of ``item_id`` starts at ``offset``) if far
        enough from the previous one.  Caller holds the journal lock (or the file is not shared
        yet, while opening)."""
        if not self.index_offsets or offset - self.index_offsets[-1] >= INDEX_EVERY:
            self.index_ids.append(item_id)
            self.index_offsets.append(offset)

    def end_at(self, offset: int) -> None:
        """The file's valid records end at ``offset``: recovery cut it there (or found it ends
        there), and no read goes past it.  Caller holds the journal lock (or the file is not
        shared yet, while opening)."""
        self.size = offset

    def cache_first_add_ms(self, add_ms: int) -> None:
        """Keep the add time of the file's first record, once read.  No lock needed: that
        record never changes, so two racing readers store the same value."""
        self.first_add_ms = add_ms


class SharedFd:
    """A read descriptor used outside the journal lock: closed only once it is retired *and*
    its last user released it.  ``acquire``/``release``/``retire`` are called under the lock."""

    __slots__ = ("fd", "users", "retired")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.users = 0
        self.retired = False

    def acquire(self) -> int:
        self.users += 1
        return self.fd

    def release(self) -> None:
        self.users -= 1
        if self.retired and self.users == 0:
            self._close()

    def retire(self) -> None:
        self.retired = True
        if self.users == 0:
            self._close()

    def _close(self) -> None:
        fd, self.fd = self.fd, -1
        if fd >= 0:
            try:
                fileio.ops.close(fd)
            except OSError:
                pass


class LogState:
    """The journal's shared state (see the module docstring); guarded by ``lock``.

    Read its attributes; change them only through its methods.
    """

    def __init__(self, directory: str, name: str, config: QueueConfig) -> None:
        self.directory = directory
        self.name = name
        self.config = config
        self.lock = threading.Lock()
        self.files: list[JournalFile] = []
        self.next_id = 1
        self.last_add_ms = 0  # add times never go backwards (binary search relies on it)
        self.recovery_report: list[RecoveryEvent] = []
        self.read_fds: OrderedDict[int, SharedFd] = OrderedDict()  # file ms -> fd, LRU first
        self.closed = False
        self.poisoned: JournalIOError | None = None
        self.poisoned_at: float | None = None  # wall-clock time it was poisoned

    # ----------------------------------------------------------------------------- changes
    def opened(self, files: list[JournalFile], next_id: int, last_add_ms: int) -> None:
        """Install what opening recovered: ``files`` oldest first (empty when there were none:
        the writer then creates the first), the id the next item gets, and the latest add time
        recorded in the files scanned.  Called once, by log/opening.py, before the journal is
        shared (so without the lock)."""
        assert not self.files, "a journal is opened once"
        self.files = files
        self.next_id = next_id
        self.last_add_ms = last_add_ms

    def appended(self, next_id: int, add_ms: int) -> None:
        """Records up to id ``next_id - 1`` were encoded into the writer's buffer, the last one
        added at ``add_ms`` (the caller clamped it: never earlier than ``last_add_ms``).  Called
        once per run of records encoded into one file, after encoding, so a failed encode takes
        no id.  Caller holds the lock."""
        self.next_id = next_id
        self.last_add_ms = add_ms

    def wrote_out(self, n: int) -> None:
        """``n`` more bytes of records reached the newest file (the writer's buffer, handed to
        the OS).  Caller holds the lock."""
        self.files[-1].size += n

    def add_file(self, jf: JournalFile) -> None:
        """``jf``, just created by the writer, is the newest file: appends go to it from now
        on.  Caller holds the lock (or the journal is not shared yet, while opening)."""
        assert not self.files or jf.ms > self.files[-1].ms, "files stay sorted by creation time"
        self.files.append(jf)

    def forget_file(self, jf: JournalFile) -> bool:
        """Drop ``jf``, one of the older files, before archiving it, and retire its read
        descriptor (closed once no read holds it).  False, changing nothing, if ``jf`` is not
        one of the older files (already forgotten, or the newest, which is never archived).
        Caller holds the lock."""
        if jf not in self.files[:-1]:
            return False
        self.files.remove(jf)
        shared = self.read_fds.pop(jf.ms, None)
        if shared is not None:
            shared.retire()
        return True

    def reinstate_file(self, jf: JournalFile) -> None:
        """Know ``jf`` again, in its place by creation time: :meth:`forget_file` dropped it but
        it is still in the directory (moving or deleting it failed), and the journal never
        forgets a file that stays there.  Caller holds the lock."""
        bisect.insort(self.files, jf, key=lambda f: f.ms)

    def report(self, event: RecoveryEvent) -> bool:
        """Add ``event`` to ``recovery_report`` unless an equal one is there already (damage
        met by several reads is reported once).  True if it was added.  Caller holds the lock
        (or the journal is not shared yet, while opening)."""
        if event in self.recovery_report:
            return False
        self.recovery_report.append(event)
        return True

    def close(self) -> None:
        """Mark the journal closed (reads and writes refuse from now on) and retire every read
        descriptor (each is closed once no read holds it).  Caller holds the lock, except a
        forked child abandoning the journal: it has one thread, and the lock may be held by a
        thread of the parent that does not exist there."""
        self.closed = True
        for shared in self.read_fds.values():
            shared.retire()
        self.read_fds.clear()

    # ----------------------------------------------------------------------------- lookups
    # (``read_fd`` changes the descriptor cache too; like every lookup it runs under the lock)
    def file_index(self, ms: int) -> int:
        """Index of the file created at ``ms`` in ``files``, or -1."""
        keys = [f.ms for f in self.files]
        i = bisect.bisect_left(keys, ms)
        return i if i < len(keys) and keys[i] == ms else -1

    def file_of(self, item_id: int) -> int:
        """Index of the file that holds (or would hold) ``item_id``."""
        return max(0, bisect.bisect_right(self.files, item_id, key=lambda f: f.first_id) - 1)

    def read_fd(self, jf: JournalFile) -> SharedFd:
        """The shared read descriptor of ``jf``, opened on first use; at most ``READ_FDS`` are
        kept, and one evicted while a read uses it is closed when that read releases it."""
        fds = self.read_fds
        shared = fds.get(jf.ms)
        if shared is not None:
            fds.move_to_end(jf.ms)
            return shared
        while len(fds) >= READ_FDS:
            fds.popitem(last=False)[1].retire()
        shared = fds[jf.ms] = SharedFd(fileio.ops.open(jf.path, os.O_RDONLY))
        return shared

    # ----------------------------------------------------------------------------- refusing writes
    def poison(self, exc: OSError) -> JournalIOError:
        """Refuse every later write: after a failed write or fsync the kernel may have dropped
        the dirty pages, and a retry could report success for data that is gone."""
        err = JournalIOError(exc.errno, f"journal write failed: {exc.strerror or exc}", exc.filename)
        if self.poisoned is None:  # the first failure is the cause: keep it and its time
            self.poisoned, self.poisoned_at = err, CLOCK.time()
        return err

    def mark_gone(self, what: str, err_no: int) -> QueueDirectoryGone:
        """The directory or the current file was removed or replaced: refuse every later write
        (it would land in a file without a name, or in somebody else's directory).  Call with
        the lock held."""
        if not isinstance(self.poisoned, QueueDirectoryGone):
            self.poisoned = QueueDirectoryGone(
                err_no,
                f"{what}; the queue refuses writes: close it, then restore the directory",
                self.directory,
            )
            self.poisoned_at = CLOCK.time()
        return self.poisoned

    def check_writable(self) -> None:
        """Raise :class:`QueueClosed`, :class:`QueueDirectoryGone` or :class:`JournalIOError`
        if the journal refuses writes.  Caller holds the lock."""
        if self.closed:
            raise QueueClosed("journal is closed")
        if isinstance(self.poisoned, QueueDirectoryGone):
            gone = self.poisoned
            raise QueueDirectoryGone(gone.errno, gone.strerror, gone.filename)
        if self.poisoned is not None:
            raise JournalIOError(
                self.poisoned.errno,
                f"queue refuses writes after an earlier I/O failure ({self.poisoned.strerror}); "
                "close and reopen it",
            )


def keep_aside(state: LogState, path: str, offset: int, data: bytes) -> str:
    """Save bytes cut from a journal file as ``<file>.at<offset>.damaged`` (durably, before
    the cut) so nothing recovery drops is gone for good."""
    kept = f"{path}.at{offset}.damaged"
    fileio.write_atomic(kept, data, state.config.file_mode)
    return kept
