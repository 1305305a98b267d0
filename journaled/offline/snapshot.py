"""What a queue directory's files say, read without owning it: ``journaled stat`` and
``journaled.inspect_queue`` (journaled/inspection.py) both start here.

Nothing here writes, creates or locks anything: not the directory, not ``.journaled.lock`` (who
holds it is read from ``/proc/locks``, never probed with ``flock``, which could make an open
racing with us believe the queue is owned), not a checkpoint.  A path that is missing, not a
directory, holds no queue or several (without a name) raises :class:`NotAQueue` before any file
is read; nothing is ever created where there is no queue.
"""

from __future__ import annotations

import os
import re
import time

import attrs

from journaled.config import validate_name
from journaled.disk.bookmarks import BOOKMARK_DIR, read_bookmarks
from journaled.disk.checkpointfiles import (
    checkpoint_path,
    list_checkpoints,
    read_checkpoint,
    read_registry,
    registry_path,
)
from journaled.disk.dirlock import LOCK_FILE
from journaled.disk.layout import is_journal
from journaled.errors import InvalidName, JournaledError
from journaled.format.smallfiles import CheckpointData, ReaderCounts
from journaled.offline.scan import JournalScanner

_JOURNAL_NAME = re.compile(r"(.+)\.(\d{1,20})")
_REGISTRY_NAME = re.compile(r"(.+)\.readers")


class NotAQueue(JournaledError, ValueError):
    """The path is missing, not a directory, holds no queue, or holds several and no (or
    another) name was given.  ``path`` and ``reason`` say which; nothing was created."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


def queues_in(path: str) -> list[str]:
    """The queues a directory holds: names with a journal file (proved by its header) or a
    readable reader registry.  Reads only; a missing or non-directory path is :class:`NotAQueue`."""
    if not os.path.lexists(path):
        raise NotAQueue(path, "does not exist")
    if not os.path.isdir(path):
        raise NotAQueue(path, "not a directory")
    found: set[str] = set()
    for entry in os.listdir(path):
        m = _JOURNAL_NAME.fullmatch(entry) or _REGISTRY_NAME.fullmatch(entry)
        if m is None or entry.startswith("."):
            continue
        try:
            name = validate_name(m.group(1))
        except InvalidName:
            continue
        full = os.path.join(path, entry)
        if name in found:
            continue
        if m.re is _JOURNAL_NAME and is_journal(full, name, int(m.group(2))):
            found.add(name)
        elif m.re is _REGISTRY_NAME and read_registry(full) is not None:
            found.add(name)
    return sorted(found)


def queue_name(path: str, name: str | None) -> str:
    """The one queue ``path`` holds (or ``name``, if it holds that); else :class:`NotAQueue`."""
    names = queues_in(path)
    if not names:
        raise NotAQueue(path, "no journaled queue here (no journal files)")
    if name is not None:
        if name not in names:
            raise NotAQueue(path, f"holds no queue {name!r} (it holds: {', '.join(names)})")
        return name
    if len(names) > 1:
        raise NotAQueue(path, f"holds several queues ({', '.join(names)}); pick one with --name")
    return names[0]


def lock_holder(path: str) -> int | None:
    """The pid holding ``path``'s directory lock (-1: held, pid not visible here), or None.

    Read from ``/proc/locks`` (Linux), matched by the lock file's inode: never by taking the
    lock, even shared and for an instant.  None also where ``/proc/locks`` cannot be read; then
    only a live owner answering on its socket shows the queue is open."""
    try:
        st = os.stat(os.path.join(path, LOCK_FILE), follow_symlinks=False)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    exact = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    loose: int | None = None
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF" (a blocked waiter: "1: -> FLOCK ...")
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[3] != "WRITE":
            continue
        pid = int(fields[4]) if fields[4].isdigit() else 0
        if fields[5] == exact:
            return pid or -1
        if fields[5].rsplit(":", 1)[-1] == str(st.st_ino) and loose is None:
            loose = pid or -1  # a stacked filesystem may name another device for the same file
    return loose


@attrs.frozen
class DiskReader:
    """One reader as its checkpoint and the journal files say (as of its last checkpoint).

    Attributes:
        name: the reader's name.
        head: every id below it is committed (clipped to the oldest id still on disk).
        backlog_items: ids from ``head`` not committed (ids lost in a gap count too).
        backlog_bytes: payload bytes of the records on disk from ``head`` not committed (exact:
            every such record is read once).
        oldest_age: seconds since the oldest record not committed was added, or None.
        done_out_of_order: ids past ``head`` committed out of order.
        checkpoint_age: seconds since the checkpoint file was written, or None if missing.
        checkpoint_ok: the checkpoint file exists and is intact.
        counts: the reader's counters as of that checkpoint (all 0 without one).
    """

    name: str
    head: int
    backlog_items: int
    backlog_bytes: int
    oldest_age: float | None
    done_out_of_order: int
    checkpoint_age: float | None
    checkpoint_ok: bool
    counts: ReaderCounts = ReaderCounts()


@attrs.frozen
class DiskBookmark:
    """An external reader's bookmark (a Spark query's committed offset): its head and lag."""

    name: str
    head: int
    lag: int
    bookmark_age: float | None


@attrs.frozen
class DiskView:
    """A queue directory as its files say, read without owning it (see the module docstring).

    ``next_id - first_id`` ids are on disk (``items``) in ``files`` journal files of ``bytes``
    bytes; ``oldest_item_age`` is the age of the oldest record, ``newest_file_age`` of the
    newest file; ``damaged_files_kept`` are the files recovery set aside; ``lock_holder`` is
    the pid holding the directory (:func:`lock_holder`)."""

    path: str
    name: str
    files: int
    bytes: int
    first_id: int
    next_id: int
    items: int
    oldest_item_age: float | None
    newest_file_age: float | None
    readers: tuple[DiskReader, ...]
    external_readers: tuple[DiskBookmark, ...]
    damaged_files_kept: tuple[str, ...]
    lock_holder: int | None


def reader_state(path: str, name: str, reader: str) -> CheckpointData | None:
    """Reader ``reader``'s checkpoint (head 0 if damaged), or None if it has none."""
    ck = checkpoint_path(path, name, reader)
    if not os.path.exists(ck):
        return None
    return read_checkpoint(ck) or CheckpointData(head=0)


def _age(now: float, path: str) -> float | None:
    try:
        return round(now - os.path.getmtime(path), 3)
    except OSError:
        return None


def read_disk(path: str, name: str | None = None) -> DiskView:
    """Read ``path``'s queue (``name``, or the only one it holds) as a :class:`DiskView`.

    Reads every record some reader has not committed once, to count its bytes and find its
    oldest item; writes nothing.  :class:`NotAQueue` for a wrong path."""
    scanner = JournalScanner(path, queue_name(path, name))
    name = scanner.name
    holder = lock_holder(path)
    files = scanner.files()
    now = time.time()
    good = [f.header for f in files if f.header is not None]
    first_id = good[0].first_id if good else 1
    last_file_id = good[-1].first_id if good else 1
    names = set(list_checkpoints(path, name)) | set(read_registry(registry_path(path, name)) or ())
    states: dict[str, CheckpointData | None] = {}
    intact: dict[str, bool] = {}
    for r in sorted(names):
        ck = checkpoint_path(path, name, r)
        data = read_checkpoint(ck) if os.path.exists(ck) else None
        intact[r] = data is not None
        states[r] = data if data is not None else (CheckpointData(head=0) if os.path.exists(ck) else None)
    heads = {r: max(s.head, first_id) if s else first_id for r, s in states.items()}
    done = {r: frozenset(s.done) if s else frozenset() for r, s in states.items()}
    nbytes = dict.fromkeys(heads, 0)
    oldest: dict[str, int] = {}
    next_id = last_file_id
    oldest_ms: int | None = None
    if good:
        start = min([last_file_id, *heads.values()])
        for rec in scanner.records(start):
            next_id = rec.id + 1
            if oldest_ms is None and start == first_id:
                oldest_ms = rec.add_ms
            for r, head in heads.items():
                if rec.id >= head and rec.id not in done[r]:
                    nbytes[r] += len(rec.payload)
                    oldest.setdefault(r, rec.add_ms)
        if oldest_ms is None:
            oldest_ms = next((rec.add_ms for rec in scanner.records(first_id)), None)
    readers = []
    for r, head in heads.items():
        ck = checkpoint_path(path, name, r)
        skipped = sum(1 for i in done[r] if head <= i < next_id)
        readers.append(
            DiskReader(
                name=r,
                head=head,
                backlog_items=max(0, next_id - head - skipped),
                backlog_bytes=nbytes[r],
                oldest_age=round(now - oldest[r] / 1000, 3) if r in oldest else None,
                done_out_of_order=skipped,
                checkpoint_age=_age(now, ck),
                checkpoint_ok=intact[r],
                counts=state.counts if (state := states[r]) is not None else ReaderCounts(),
            )
        )
    bookmarks = tuple(
        DiskBookmark(
            r, head, max(0, next_id - max(head, first_id)), _age(now, os.path.join(path, BOOKMARK_DIR, r))
        )
        for r, head in sorted(read_bookmarks(path).items())
    )
    return DiskView(
        path=os.path.abspath(path),
        name=name,
        files=len(files),
        bytes=sum(f.size for f in files),
        first_id=first_id,
        next_id=next_id,
        items=next_id - first_id,
        oldest_item_age=round(now - oldest_ms / 1000, 3) if oldest_ms else None,
        newest_file_age=round(now - files[-1].ms / 1000, 3) if files else None,
        readers=tuple(readers),
        external_readers=bookmarks,
        damaged_files_kept=tuple(sorted(e for e in os.listdir(path) if e.endswith(".damaged"))),
        lock_holder=holder,
    )
