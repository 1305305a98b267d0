"""The exception hierarchy of journaled.

Every error the library raises on purpose derives from :class:`JournaledError`, so callers can
catch "anything journaled said no to" in one clause.  ``Empty`` and ``Full`` also derive from the
stdlib's ``queue.Empty`` / ``queue.Full`` so code written for :mod:`queue` keeps working.
"""

from __future__ import annotations

import queue as _stdlib_queue
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from journaled.item import Item


class JournaledError(Exception):
    """Base class of every error raised by journaled."""


class QueueClosed(JournaledError):
    """The queue (or reader) was closed; waiting ``get`` calls are woken with this."""


class QueueForked(QueueClosed):
    """A queue object used in a process forked after it was opened (multiprocessing's ``fork``
    start method, a pre-forking server).  The directory still belongs to the parent: the child
    writes nothing through the parent's object.  Open the queue in the process that uses it, or
    let children hand items over with :func:`journaled.spool_put`."""


class ItemTooLarge(JournaledError, ValueError):
    """A payload is larger than ``QueueConfig.max_item_size``; nothing was written."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(f"item of {size} bytes exceeds max_item_size={limit}")
        self.size = size
        self.limit = limit


class QueueLocked(JournaledError):
    """Another ``JournaledQueue`` (in this process or another) owns the directory."""

    def __init__(self, path: str, pid: int | None, detail: str = "") -> None:
        who = f"process {pid}" if pid else "another owner"
        super().__init__(f"queue directory {path!r} is locked by {who}" + (f", {detail}" if detail else ""))
        self.path = path
        self.pid = pid


class InvalidName(JournaledError, ValueError):
    """A queue or reader name is not ``[A-Za-z0-9_.:-]{1,128}`` or starts with a dot."""


class CorruptJournal(JournaledError):
    """Damaged bytes were found in a journal or checkpoint file.

    ``path`` and ``offset`` locate the first damaged byte; ``reason`` says what check failed.
    """

    def __init__(self, path: str, offset: int, reason: str) -> None:
        super().__init__(f"{path}: damaged at byte {offset}: {reason}")
        self.path = path
        self.offset = offset
        self.reason = reason


class UnsupportedVersion(CorruptJournal):
    """A file declares a format version, or holds a valid record of a type, that this library
    does not know and must not ignore; it is refused, not guessed (docs/format.md [F-11]).
    Readers deliver every item before such a record and stop there."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        JournaledError.__init__(
            self, f"{path}: byte {offset}: {reason} (written by a newer version of journaled?)"
        )
        self.path = path
        self.offset = offset
        self.reason = reason


class CompressionUnavailable(UnsupportedVersion):
    """A queue configured for, or a journal holding records compressed with, a codec whose Python
    binding is not installed (``pip install 'journaled[zstd]'``; Python 3.14 has it built in).
    Raised at the first such record, after every item before it was delivered: never skipped,
    never reported as damage."""

    def __init__(self, path: str, offset: int, reason: str) -> None:
        JournaledError.__init__(
            self, f"{path}: byte {offset}: {reason}: install the binding with pip install 'journaled[zstd]'"
        )
        self.path = path
        self.offset = offset
        self.reason = reason


class ForeignFile(JournaledError):
    """A file in the queue directory is named like one of the queue's journal files but was not
    written by journaled (it does not start with the journal magic).  It is never renamed,
    deleted or read as a journal; the open is refused because the directory is ambiguous."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class UnknownRead(JournaledError, KeyError):
    """``commit``/``abort`` of an id that is not an open read on this reader."""

    def __str__(self) -> str:  # KeyError would repr() the message
        return str(self.args[0]) if self.args else "unknown read"


class UnknownReader(JournaledError, KeyError):
    """A reader name that does not exist (e.g. ``remove_reader`` of a missing one)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "unknown reader"


class JournalIOError(JournaledError, OSError):
    """An operating-system error while writing or syncing the journal.

    Carries the original ``errno``/``strerror``/``filename``; the original exception is also
    chained as ``__cause__``.  After a failed fsync the queue is *poisoned*: every later write
    raises this error until the queue is closed and reopened, because the kernel may have dropped
    the dirty pages and a retried fsync could falsely report success.
    """


class UnsafeDirectory(JournaledError, OSError):
    """A queue directory, or a name inside it, is not safe to use, and nothing was done to it.

    Raised when the directory can be written by other users or is owned by another user (opt in
    with ``QueueConfig(allow_shared_dir=True)``), or when a name the library would open inside it
    is a symbolic link or a hard-linked lock file (journaled never opens anything through one;
    the file it points to is left untouched).  An ``OSError`` with ``errno`` (``ELOOP`` for a
    link, ``EPERM`` otherwise) and ``filename``, so code that handles I/O errors handles it too.
    """

    def __init__(self, err: int, reason: str, path: str) -> None:
        super().__init__(err, reason, path)
        self.path = path
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path!r}: {self.reason}"


class QueueDirectoryGone(JournalIOError):
    """The queue's directory, or the journal file being written, was removed or replaced under
    the open queue (``rm -rf``, a rename, an unmounted volume).

    Noticed by the background within one tick (and before a new journal file is created); from
    then on every write raises this error, nothing more is written or checkpointed into whatever
    is now at the path, and ``stats().health.directory_gone`` is True.  Close the queue, then
    restore the directory (or reopen it where it was moved to).
    """


class Empty(JournaledError, _stdlib_queue.Empty):
    """No item became available (non-blocking ``get`` or a timeout)."""


class Full(JournaledError, _stdlib_queue.Full):
    """A reader is full (``max_items``/``max_size``) and does not discard old items."""


class SerializationError(JournaledError, ValueError):
    """An object could not be turned into a payload, or a payload back into an object, by the
    serializer of :class:`journaled.Queue` or a wrapper (the original error is ``__cause__``).

    ``item`` is set when a *delivered* payload failed to load: it is still an open read, so the
    caller decides (``task_done``/commit it to drop it, or leave it to be redelivered).
    """

    item: Item | None = None


class OwnerLost(JournaledError):
    """The process owning the queue closed or died while this call was in flight (a client of
    another process's queue only).  The client reconnects by itself (to the next owner, or
    becomes the owner); calling again is safe.  A read opened before the loss is not open any
    more (it is delivered again).

    A ``put``/``put_many`` whose owner died before answering does not raise this: the client
    makes it again, with the same producer tag, on the next owner, which stores only what was
    not stored (exactly once).  ``outcome_unknown`` is True where such a retry is impossible:

    * a ``commit``/``commit_many``/``abort``/``release``/``reject`` that reached an owner which
      died before answering: it may or may not have landed, and the read it settled is not open
      on the next owner (it is delivered again: at least once);
    * a put that reached an owner which stopped answering within the reply's deadline without
      dying (stopped, wedged): it still holds the queue, so there is no next owner to ask, and
      it may still carry the put out;
    * a put whose owner died and no next owner answered within 60 seconds
      (``remote.routing.PUT_RETRY``).

    Calling such a put again stores it anew (a new tag): it may then be stored twice."""

    outcome_unknown: bool = False


class OwnerBusy(JournaledError):
    """A client of another process's queue needed one more connection to its owner, the owner
    refused it (its connection limit), and none of this process's own came free in time.
    Nothing was sent: calling again is safe, and the process's other calls and open reads are
    unaffected (docs/design.md, "Many processes, one queue")."""


__all__ = [
    "CorruptJournal",
    "Empty",
    "Full",
    "InvalidName",
    "ItemTooLarge",
    "JournalIOError",
    "JournaledError",
    "QueueClosed",
    "QueueDirectoryGone",
    "QueueForked",
    "QueueLocked",
    "OwnerBusy",
    "OwnerLost",
    "SerializationError",
    "UnknownRead",
    "UnknownReader",
    "UnsafeDirectory",
    "UnsupportedVersion",
]
