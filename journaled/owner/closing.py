"""How an open queue ends: closed, failed while opening, or inherited by a forked child.

queue.py decides *when* (``close()``, the interpreter's exit, garbage collection, a failed
``__init__``, the fork hook: see disk/lifecycle.py); this module is *what* each ending does to the
parts the queue owns, in the one order that keeps the promises of docs/design.md ("Close"):

* :func:`close_readers` (blocked ``get`` calls woken, except at exit), then :func:`close_parts`:
  stop the threads (handing sink-bound items over), sync, checkpoint only over a synced
  journal, close the journal, release the directory last;
* :func:`undo_open`: a failed open closes whatever it had opened and releases the directory,
  so no descriptor and no lock outlive the exception;
* :class:`Closing`: ``with``, and closing a queue object that was collected while open;
* :func:`forget_in_child`: a forked child writes nothing through the parent's files, drops its
  copies of the descriptors and gives the readers a lock no vanished thread can hold.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TypeVar

from journaled.core.readercore import ReaderCore
from journaled.disk import lifecycle
from journaled.disk.dirlock import DirLock
from journaled.errors import QueueClosed, QueueForked
from journaled.log.journal import Journal
from journaled.owner.engine import Engine

log = logging.getLogger("journaled")


def closed_error(path: str, forked: bool) -> QueueClosed:
    """What a call on a closed queue raises; :class:`QueueForked` in a forked child."""
    if forked:
        return QueueForked(
            f"queue {path!r} belongs to the process this one was forked from; open it in this process "
            f"(JournaledQueue(path) or journaled.Queue(path) then uses it through its owner), or pass "
            f"it to a multiprocessing child started with 'spawn' or 'forkserver', which does that"
        )
    return QueueClosed(f"queue {path!r} is closed")


def reader_closed(core: ReaderCore) -> QueueClosed:
    """What a call on a closed reader raises; :class:`QueueForked` in a forked child."""
    if core.forked:  # a flag on the core: a compiled core takes no weak reference (lifecycle's set)
        return QueueForked(f"reader {core.name!r} belongs to the process this one was forked from")
    return QueueClosed(f"reader {core.name!r} is closed")


def check_process(path: str, forked: bool) -> None:
    """Refuse calls that still work on a closed queue (checkpoint, archive, stats) in a forked
    child: they would write to, or wait on locks of, the parent's queue."""
    if forked:
        raise closed_error(path, forked)


S = TypeVar("S", bound="Closing")


class Closing:
    """What an open queue object shares: ``with`` closes it, and one garbage-collected while
    still open warns (``ResourceWarning``, as an unclosed file does), then closes itself."""

    @property
    def closed(self) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def __del__(self) -> None:
        if getattr(self, "closed", True):  # closed, or its __init__ failed: nothing to do
            return
        warnings.warn(f"unclosed {self!r}: closed when collected", ResourceWarning, source=self)
        if not lifecycle.on_background_thread():
            self._close_collected()
            return
        # The collector ran on one of our threads, which may hold this queue's locks (it holds
        # the queue only weakly): closing here could wait on itself.  Close on a thread of its
        # own, not a daemon, so that the interpreter waits for it at exit: said outright, as a
        # thread is otherwise a daemon when the thread starting it is (ours are), and an exit
        # would then cut the close short and lose the puts it had yet to write.
        try:
            threading.Thread(target=self._close_collected, name="journaled-close", daemon=False).start()
        except RuntimeError as exc:  # the interpreter is shutting down
            log.error("could not close the unclosed %r: %s", self, exc)

    def _close_collected(self) -> None:
        try:
            self.close()
        except Exception as exc:
            log.error("closing the unclosed %r failed: %s", self, exc)


def close_readers(cores: Sequence[ReaderCore], wake: bool) -> None:
    """Close every reader (under the queue lock); each leaves a fresh checkpoint behind.

    ``wake=False`` at interpreter exit: threads blocked in ``get`` are not woken.  The only ones
    left then are daemon threads, which end with the process as they would with
    :class:`queue.Queue`; woken, each would die of ``QueueClosed`` with a traceback.
    """
    for core in cores:
        core.close(wake)
        core.mark_dirty()


def close_parts(engine: Engine, journal: Journal, checkpoint: Callable[[], None], dirlock: DirLock) -> None:
    """The body of ``close()``, once the queue is marked closed and its waiters are woken."""
    try:
        engine.stop()
        try:
            journal.sync()
        except Exception as exc:
            log.error("final sync of %s failed: %s", journal.directory, exc)
        else:
            checkpoint()  # a poisoned journal keeps the old checkpoints, which replay
    finally:
        try:
            journal.close()
        finally:
            dirlock.release()


def undo_open(journal: Journal | None, dirlock: DirLock) -> None:
    """Release what a failed open took; the open's own exception is the one the caller sees."""
    try:
        if journal is not None:
            journal.close()
    except Exception as exc:
        log.error("closing %s after a failed open failed: %s", dirlock.directory, exc)
    finally:
        dirlock.release()


def forget_in_child(cores: Sequence[ReaderCore], journal: Journal) -> threading.Lock:
    """In a forked child, on its only thread: close every reader (their calls now raise) and drop
    the journal's descriptors without writing.  The queue lock may have been held at the fork by
    a thread that does not exist here: the readers get a fresh lock, which is returned."""
    lock = threading.Lock()
    for core in cores:
        core.close_in_child(lock)
    journal.abandon()
    return lock
