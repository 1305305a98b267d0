"""The queues a queue's stored sinks name (``expire_to`` / ``dead_letter`` ``{"queue": path}``):
opened by path when the owner opens, kept while it is open, closed with it."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, MutableMapping
from typing import Any, cast

from journaled.config import Sink, sink_dir

log = logging.getLogger("journaled")


class Destinations:
    """The destination queues one owner opened, by directory.

    ``owned`` maps the directories this process owns to their open queue (used as they are);
    ``opener(path)`` opens any other queue, as its owner or as a client of its owner."""

    def __init__(self, path: str, owned: MutableMapping[str, Any], opener: Callable[[str], Any]) -> None:
        self.path = path
        self._owned = owned
        self._opener = opener
        self._open: dict[str, Any] = {}

    def open(self, spec: dict[str, str]) -> Sink | None:
        """The queue a stored sink ``{"queue": path}`` names, or ``None`` (logged) when it cannot
        be opened.  This queue itself, or one this process owns, is used as it is; any other is
        opened by path and closed with this one.  A missing directory is not created (it may be a
        moved pair of directories)."""
        path = sink_dir(spec, self.path)
        if path is None:
            return None
        found = self._open.get(path) or self._owned.get(path)
        if found is not None and not found.closed:
            return cast("Sink", found)
        if not os.path.isdir(path):
            log.warning("queue %s: destination %s is not a directory", self.path, path)
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
        for dest in self._open.values():
            try:
                dest.close()
            except Exception:  # one destination failing to close must not keep the others open
                log.exception("queue %s: closing destination %s failed", self.path, dest.path)
