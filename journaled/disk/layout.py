"""Names of the files in a queue directory, and which queue a directory holds.

``<queue>.<creation ms>`` journal files, ``<queue>.read.<reader>`` checkpoints (disk/checkpointfiles.py),
``<queue>.readers``, ``<queue>.settings`` (disk/settingsfile.py), ``<queue>.dedup``
(disk/dedupindex.py), ``.journaled.lock``
(disk/dirlock.py), ``spool/`` (disk/spoolfiles.py), ``external/`` (disk/bookmarks.py).
docs/format.md lists them all.
"""

from __future__ import annotations

import os
import re
import stat

import attrs

from journaled.config import validate_name
from journaled.disk import fileio
from journaled.errors import CorruptJournal, InvalidName, UnsupportedVersion
from journaled.format.record import (
    JOURNAL_MAGIC,
    MAX_BODY,
    RECORD_HEADER_SIZE,
    FileHeader,
    decode_header,
    header_size,
    near_magic,
    salvage_header,
)

#: The owner's lease (disk/lease.py): which host owns the directory, renewed while it does.
LEASE_FILE = ".journaled.lease"

_FILE_RE_CACHE: dict[str, re.Pattern[str]] = {}
_ANY_JOURNAL_RE = re.compile(r"(.+)\.(\d{1,20})")


def journal_file_re(name: str) -> re.Pattern[str]:
    """The file names of queue ``name``'s journal files (the number is the creation ms)."""
    pat = _FILE_RE_CACHE.get(name)
    if pat is None:
        pat = _FILE_RE_CACHE[name] = re.compile(re.escape(name) + r"\.(\d{1,20})")
    return pat


def journal_path(directory: str, name: str, ms: int) -> str:
    return os.path.join(directory, f"{name}.{ms}")


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


#: 2001-09-09 in ms since the epoch: every journal file we create is numbered at least this (a
#: rotated log is "app.1", never "app.1795576809074").
MS_NAMES_FROM = 10**12

#: Bytes read to rebuild a damaged header: the header and the first records after it.
_SALVAGE_READ = 1 << 20


@attrs.frozen
class HeaderCheck:
    """What the first bytes of a file named like a journal file say about it.

    ``ours``: it starts with the journal magic, its records prove it a journal file, or it is
    named as only we name files and starts with zeros or part of the magic (a header write lost
    or cut short by a crash).  ``header``: the decoded header, or the one
    rebuilt from the records when ``problem`` says what was damaged; ``None`` when unreadable.
    """

    header: FileHeader | None
    size: int
    ours: bool
    problem: str | None = None
    regular: bool = True

    @property
    def intact(self) -> bool:
        return self.header is not None and self.problem is None


def _open_regular(path: str) -> int | None:
    """A read descriptor on ``path``, or ``None`` when it is not a regular file (a FIFO never
    blocks); :class:`FileNotFoundError` when it is gone, :class:`UnsafeDirectory` for a symlink
    (never followed, never renamed)."""
    fd = fileio.open_nofollow(path, os.O_RDONLY | os.O_NONBLOCK)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def inspect_journal(path: str, name: str, ms: int) -> HeaderCheck:
    """Read and judge the header of journal file ``path`` of queue ``name``.

    A header whose magic is intact but which fails another check is rebuilt from the records
    (format/record.py's :func:`~journaled.format.record.salvage_header`).  Raises :class:`FileNotFoundError`
    when the file is gone (archived meanwhile) and :class:`~journaled.errors.UnsupportedVersion`
    for a file written by another format version.  Something that is not a regular file is not
    ours.
    """
    fd = _open_regular(path)
    if fd is None:
        return HeaderCheck(None, 0, False, "not a regular file", regular=False)
    try:
        size = os.fstat(fd).st_size
        try:
            return HeaderCheck(decode_header(os.pread(fd, 512, 0), path), size, True)
        except CorruptJournal:
            pass
        # Read the start again, with the records after the header: the file may have grown
        # since (a header being written by the owner), and rebuilding needs the records.
        size = os.fstat(fd).st_size
        buf = _read_start(fd, name)
        try:
            return HeaderCheck(decode_header(buf, path), size, True)
        except UnsupportedVersion as exc:
            rebuilt = salvage_header(buf, name, ms)
            if rebuilt is None:
                raise
            return HeaderCheck(rebuilt, size, True, exc.reason)
        except CorruptJournal as exc:
            rebuilt = salvage_header(buf, name, ms)
            if rebuilt is None and not buf.startswith(JOURNAL_MAGIC):
                # Not ours, unless the magic is only damaged, or the file is named with a creation
                # time in ms as we name files and opens with zeros (a header write lost by a
                # crash; one cut short inside the magic leaves a file no longer than a header,
                # which is_ours accepts by its size) [F-8].
                lost = not any(buf[: len(JOURNAL_MAGIC)])
                return HeaderCheck(None, size, near_magic(buf) or (lost and ms >= MS_NAMES_FROM), exc.reason)
            return HeaderCheck(rebuilt, size, True, exc.reason)
    finally:
        os.close(fd)


def is_ours(check: HeaderCheck, name: str, ms: int) -> bool:
    """Whether a file judged ``check`` belongs to the queue: :attr:`HeaderCheck.ours`, or it is
    no longer than a header and named with a creation time in ms as only we name files -- a
    creation cut short, where a power cut may leave garbage instead of the header (a rotated log
    is "app.1", not "app.1795576809074").  Such a file holds no record."""
    return check.ours or (check.regular and ms >= MS_NAMES_FROM and check.size <= header_size(name))


def _read_start(fd: int, name: str) -> bytes:
    """The first bytes of a file: the header and the records of the next MiB, and at least the
    whole first record."""
    buf = os.pread(fd, _SALVAGE_READ, 0)
    at = header_size(name)
    if len(buf) >= at + RECORD_HEADER_SIZE:
        length = int.from_bytes(buf[at + 4 : at + 8], "little")
        need = at + RECORD_HEADER_SIZE + length
        if len(buf) < need <= at + RECORD_HEADER_SIZE + MAX_BODY:
            buf += os.pread(fd, need - len(buf), len(buf))
    return buf


def is_journal(path: str, name: str, ms: int) -> bool:
    """``path`` is a journal file of queue ``name``: its header is intact or can be rebuilt."""
    try:
        return inspect_journal(path, name, ms).header is not None
    except OSError:
        return False
    except UnsupportedVersion:
        return True


def detect_queue_name(directory: str) -> str:
    """The queue name of an existing directory (from its journal files), else its basename
    (or ``queue`` when the basename is not a valid name).

    Only files whose header proves them journal files count: a rotated log ``app.1`` names no
    queue.
    """
    valid: set[str] = set()
    for entry in os.listdir(directory):
        m = _ANY_JOURNAL_RE.fullmatch(entry)
        if not m or entry.startswith("."):
            continue
        try:
            name = validate_name(m.group(1))
        except InvalidName:
            continue
        # a checkpoint "<queue>.read.7" has the checkpoint magic, so it never counts here
        if name not in valid and is_journal(os.path.join(directory, entry), name, int(m.group(2))):
            valid.add(name)
    if len(valid) == 1:
        return valid.pop()
    if len(valid) > 1:
        raise InvalidName(f"{directory!r} holds journals of several queues {sorted(valid)}; pass name=")
    base = os.path.basename(os.path.abspath(directory))
    try:
        return validate_name(base, "queue name")
    except InvalidName:
        return "queue"
