"""A consumer's most frequent calls, each one compiled call that takes the queue lock itself.

:class:`~journaled.reader.Reader` stays plain Python (tracing wraps its methods, which a class
compiled by mypyc would not allow), but its common cases cost a frame, a context manager and a
few attribute lookups each.  These functions do that work where the core's own fields are C
fields: ``get(block=False)`` that finds an item, and ``commit``.  Each returns a "not done" answer
instead of raising when the reader is closed or others are in line, and the caller takes its
general path, which tells those cases apart; so the rules stay written once, in the core.
"""

from __future__ import annotations

from journaled.core.readercore import ReaderCore
from journaled.item import Item


def take_now(core: ReaderCore) -> Item | None:
    """The next item as an open read, under ``core.lock``; ``None`` when there is none, when
    blocked ``get`` calls are in line (they go first) or when the reader is closed."""
    lock = core.lock
    lock.acquire()
    try:
        if core.closed or core.waiters:
            return None
        return core.take()
    finally:
        lock.release()


def commit_now(core: ReaderCore, item: object) -> bool:
    """Commit the open read ``item`` names, under ``core.lock`` (``core.commit``'s errors
    propagate); ``False``, committing nothing, when the reader is closed: after close the final
    checkpoint is written, so a commit now would be lost."""
    lock = core.lock
    lock.acquire()
    try:
        if core.closed:
            return False
        core.commit(item)
        return True
    finally:
        lock.release()
