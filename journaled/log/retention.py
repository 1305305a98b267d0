"""Retention: which journal files every reader has passed, and archiving them.

A file is archivable when every record in it has an id below ``min_head`` (the smallest head the
queue's checkpoints and external bookmarks hold), or when it is past the queue's retention
(age or total size, :func:`past_retention`); the file being written never is.  Archiving
deletes the file, or moves it into ``archive_dir`` with its bytes untouched, and forgets it;
its shared read descriptor is retired (closed once no read holds it).
"""

from __future__ import annotations

import logging
import os

from journaled.disk import fileio
from journaled.log.state import JournalFile, LogState

log = logging.getLogger("journaled")


def archivable(state: LogState, min_head: int) -> list[JournalFile]:
    """Files whose every record has an id below ``min_head`` (never the active file)."""
    with state.lock:
        out = []
        for jf, nxt in zip(state.files, state.files[1:]):
            if nxt.first_id <= min_head:
                out.append(jf)
            else:
                break
        return out


def past_retention(
    state: LogState, age_ms: int | None, max_bytes: int | None, now_ms: int
) -> tuple[list[JournalFile], int]:
    """The oldest files past a retention limit, and the first id of the first file kept.

    A file is past ``age_ms`` when the next file was started at least that long before
    ``now_ms`` (its newest record is no newer than that start: never archived early).  Started:
    the later of its name and the time in its header (written when appending to it began: a
    file created ahead of need is named then and may wait before it is used); the
    oldest files are past ``max_bytes`` while the journal files together hold more than that.
    Only a prefix of the files, never the active file."""
    with state.lock:
        total = sum(jf.size for jf in state.files)
        out = []
        for jf, nxt in zip(state.files, state.files[1:]):
            old = age_ms is not None and max(nxt.ms, nxt.header.created_ms) <= now_ms - age_ms
            big = max_bytes is not None and total > max_bytes
            if not (old or big):
                break
            out.append(jf)
            total -= jf.size
        keep = state.files[len(out)].first_id if state.files else 0
        return out, keep


def archive(state: LogState, files: list[JournalFile], archive_dir: str | None) -> None:
    """Delete ``files`` (or move them into ``archive_dir``) and forget them.

    A file is dropped from the list before it is moved, so no read opens it mid-move; if the
    move or delete fails and the file is still there, it goes back into the list (and the
    error is raised): the journal never forgets a file that stays in its directory.
    """
    for jf in files:
        with state.lock:
            if not state.forget_file(jf):
                continue
        try:
            if archive_dir:
                fileio.move_into(jf.path, archive_dir)  # copies across file systems
            else:
                fileio.ops.unlink(jf.path)
        except BaseException:
            if os.path.lexists(jf.path):
                with state.lock:
                    state.reinstate_file(jf)
            raise
        log.info("archived journal file %s", jf.path)
    if files:
        fileio.ops.fsync_dir(state.directory)
        if archive_dir:
            fileio.ops.fsync_dir(archive_dir)
