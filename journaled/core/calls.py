"""A consumer's most frequent calls, each one compiled call that takes the queue lock itself.

:class:`~journaled.reader.Reader` stays plain Python (tracing wraps its methods, which a class
compiled by mypyc would not allow), but its common cases cost a frame, a context manager and a
few attribute lookups each.  These functions do that work where the core's own fields are C
fields: ``get(block=False)`` that finds an item, and ``commit``.  Each returns a "not done" answer
instead of raising when the reader is closed or others are in line, and the caller takes its
general path, which tells those cases apart; so the rules stay written once, in the core.
"""

from __future__ import annotations

from typing import Final

from journaled.core.readercore import ReaderCore
from journaled.item import Item

#: :func:`take_now`'s answers when it hands out no item.
NOT_NOW: Final = 0  # closed, or blocked gets in line: the caller's general path decides
EMPTY: Final = 1  # nothing waits, as of this one hold of the lock


def take_now(core: ReaderCore) -> Item | int:
    """The next item as an open read, under ``core.lock``; else :data:`EMPTY` when nothing
    waits, or :data:`NOT_NOW` when blocked ``get`` calls are in line (they go first) or the
    reader is closed.  ``EMPTY`` is this hold's answer: a non-blocking ``get`` must give it as it
    is, not take the lock again, or an item handed in between (a sink's put into this very
    queue, from the engine's thread) would look as if it had been there all along."""
    lock = core.lock
    lock.acquire()
    try:
        if core.closed or core.waiters:
            return NOT_NOW
        item = core.take()
        return EMPTY if item is None else item
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
