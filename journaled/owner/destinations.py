"""The queues a queue's stored sinks name (``expire_to`` / ``dead_letter`` ``{"queue": path}``):
opened by path when the owner opens, kept while it is open, closed with it.

A queue whose open is under way on this thread is one this process owns, not another owner's:
the queue itself (its own readers' stored sinks are provided while it opens), and a cycle A -> B
-> A (B, opened while A opens, names A).  Both are used as they are; until that queue is open, a
sink thread keeps the items bound for it (owner/engine.py: a closed sink is not handed any), so
nothing is appended to it before it has adopted its spool.

A destination directory must be a queue's, an empty one, or a missing one
(:func:`destination_problem`): one that holds other things, several queues, or a file is
refused when it is set (``ValueError``, as ``journaled config`` and ``serve`` refuse it) and
not opened when a stored destination names it later (the sink is reported missing), so a typo
never turns a directory of other things into a queue.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, MutableMapping
from typing import Any, cast

from journaled.config import Sink, sink_dir
from journaled.offline.snapshot import queues_in

log = logging.getLogger("journaled")

#: The directories whose queue is being opened, each with the thread opening it (a queue is
#: opened on one thread, and the opens it causes, of its destinations, run on that thread too).
_OPENING: dict[str, int] = {}


#: entries of a queue's own lock, lease and socket: a directory holding only these is empty
_OURS = (".journaled.",)


def destination_problem(path: str) -> str | None:
    """Why directory ``path`` cannot be a destination queue (None when it can: a queue's
    directory, an empty directory, or a missing one, which is opened once it exists)."""
    if not os.path.lexists(path):
        return None
    if os.path.islink(path) or not os.path.isdir(path):
        return f"{path}: not a directory"
    names = queues_in(path)
    if len(names) > 1:
        return f"{path}: holds several queues ({', '.join(names)}); a destination is one"
    if not names and any(not n.startswith(_OURS) for n in os.listdir(path)):
        return (
            f"{path}: holds no journaled queue and is not empty (a destination is a queue's "
            "directory, or an empty one)"
        )
    return None


class Destinations:
    """The destination queues one owner opened, by directory.

    ``owned`` maps the directories this process owns to their open queue (used as they are);
    ``opener(path)`` opens any other queue, as its owner or as a client of its owner.  Made
    while the queue at ``path`` opens; :meth:`opened` says when that open is done."""

    def __init__(self, path: str, owned: MutableMapping[str, Any], opener: Callable[[str], Any]) -> None:
        self.path = path
        self._owned = owned
        self._opener = opener
        self._open: dict[str, Any] = {}
        _OPENING[path] = threading.get_ident()

    def opened(self) -> None:
        """The queue at ``path`` is open (or its open failed): from now on, it is what its
        ``closed`` says to any other queue."""
        if _OPENING.get(self.path) == threading.get_ident():
            del _OPENING[self.path]

    def open(self, spec: dict[str, str]) -> Sink | None:
        """The queue a stored sink ``{"queue": path}`` names, or ``None`` (logged) when it cannot
        be opened.  This queue itself, or one this process owns (open, or being opened on this
        thread: a cycle of destinations), is used as it is; any other is opened by path and
        closed with this one.  A missing directory is not created (it may be a moved pair of
        directories)."""
        path = sink_dir(spec, self.path)
        if path is None:
            return None
        found = self._open.get(path) or self._owned.get(path)
        if found is not None and (not found.closed or _OPENING.get(path) == threading.get_ident()):
            return cast("Sink", found)
        if not os.path.isdir(path):
            log.warning("queue %s: destination %s is not a directory", self.path, path)
            return None
        problem = destination_problem(path)
        if problem is not None:
            log.warning("queue %s: destination not opened: %s", self.path, problem)
            return None
        try:
            dest = self._opener(path)
        except Exception as exc:
            log.warning("queue %s: destination %s cannot be opened: %s", self.path, path, exc)
            return None
        self._open[path] = dest
        return cast("Sink", dest)

    def provide(self, _field: str, spec: dict[str, str]) -> Sink | None:
        """A stored sink's queue (a callable only its own process has, so never one here)."""
        return self.open(spec) if "queue" in spec else None

    def close(self) -> None:
        """Close every destination this one opened."""
        self.opened()  # a failed open ends here
        for dest in self._open.values():
            try:
                dest.close()
            except Exception:  # one destination failing to close must not keep the others open
                log.exception("queue %s: closing destination %s failed", self.path, dest.path)
