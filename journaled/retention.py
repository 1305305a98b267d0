"""Retention: which journal files every reader has passed, and archiving them.

A file is archivable when every record in it has an id below ``min_head`` (the smallest head the
queue's checkpoints and external bookmarks hold); the file being written never is.  Archiving
deletes the file, or moves it into ``archive_dir`` with its bytes untouched, and forgets it;
its shared read descriptor is retired (closed once no read holds it).
"""

from __future__ import annotations

import logging
import os

from journaled import fileio
from journaled.logstate import JournalFile, LogState

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


def archive(state: LogState, files: list[JournalFile], archive_dir: str | None) -> None:
    """Delete ``files`` (or move them into ``archive_dir``) and forget them."""
    for jf in files:
        with state.lock:
            if jf not in state.files[:-1]:
                continue
            state.files.remove(jf)
            shared = state.read_fds.pop(jf.ms, None)
            if shared is not None:
                shared.retire()
        if archive_dir:
            fileio.ops.rename(jf.path, os.path.join(archive_dir, os.path.basename(jf.path)))
        else:
            fileio.ops.unlink(jf.path)
        log.info("archived journal file %s", jf.path)
    if files:
        fileio.ops.fsync_dir(state.directory)
        if archive_dir:
            fileio.ops.fsync_dir(archive_dir)
