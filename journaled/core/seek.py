"""Where a reader starts: ``ReaderConfig.start`` for a new reader, ``reader.seek`` for an
existing one.  Same positions, same rules: ``"earliest"`` (the oldest item still in the
journal), ``"latest"`` (only items put from now on), an item id (clamped into the journal), or a
point in time (``float`` epoch seconds or a ``datetime``: the first item added at or after it).

Every function here must be called with the queue lock held; moving a reader is the core's
``reset_to``.
"""

from __future__ import annotations

import datetime as _dt

from journaled.config import ReaderConfig
from journaled.core.readbehind import LogSource
from journaled.core.readercore import ReaderCore
from journaled.item import epoch_ms


def start_id(journal: LogSource, start: object) -> int:
    """The id a reader placed at ``start`` delivers first."""
    if start == "earliest":
        return journal.first_id()
    if start == "latest":
        return journal.next_id
    if isinstance(start, int):
        return min(max(start, journal.first_id()), journal.next_id)
    assert isinstance(start, (float, _dt.datetime))
    return journal.locate_time(epoch_ms(start))


def ignored_start(core: ReaderCore, start: object) -> str | None:
    """``q.reader(name, config)`` for an existing reader ignores ``config.start``: what to warn
    when it would have placed the reader elsewhere (the default ``"earliest"`` cannot be told
    from an explicit one, so it never warns), else None."""
    if start == "earliest" or start_id(core.journal, start) == core.head:
        return None
    return (
        f"ReaderConfig(start={start!r}) ignored: reader {core.name!r} already exists (head "
        f"{core.head}); start only places a new reader.  Use reader.seek({start!r}) to move it."
    )


def seek(core: ReaderCore, start: object) -> int:
    """Move ``core`` to ``start``: every id from there on is uncommitted, every id below it
    committed, as for a new reader placed there: open reads are taken back (committing one
    raises ``UnknownRead``); parked items, error counts and items not yet handed to their sink
    are forgotten.  Returns the new head.  A bad ``start`` raises ``ValueError`` first."""
    ReaderConfig(start=start)  # type: ignore[arg-type]  # validates: same rules, same message
    head = start_id(core.journal, start)
    core.reset_to(head)
    return head


__all__ = ["ignored_start", "seek", "start_id"]
