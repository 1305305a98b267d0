"""External-reader bookmarks: how a process that does not own a queue holds back archiving.

A reader in another process (a Spark query, a tailing tool) cannot register a ``Reader`` with
the owner, but it can leave a small bookmark file ``external/<name>`` in the queue directory
saying "I still need every id from ``head`` on".  The owner reads the bookmarks before each
archiving pass and never archives a journal file holding an id at or above the lowest one.

A bookmark is replaced atomically and carries a CRC; a damaged bookmark is treated as head 0
(keep everything) rather than ignored, because ignoring it could archive data its reader needs.
A stale bookmark pins the journal forever: remove it with :func:`remove_bookmark`.
"""

from __future__ import annotations

import logging
import os

from journaled.config import validate_name
from journaled.disk import fileio
from journaled.format.smallfiles import decode_crc_text, encode_crc_text

log = logging.getLogger("journaled")

BOOKMARK_DIR = "external"
_MAGIC = "journaled-bookmark 1"
#: entries of ``external/`` skipped as not regular files, logged once each
_SKIPPED: set[str] = set()


def bookmark_path(queue_dir: str, name: str) -> str:
    """Path of the bookmark called ``name`` (validated: it can never escape the directory)."""
    return os.path.join(queue_dir, BOOKMARK_DIR, validate_name(name, "bookmark name"))


def write_bookmark(queue_dir: str, name: str, head: int) -> None:
    """Durably record that reader ``name`` still needs every id ``>= head``."""
    if head < 0:
        raise ValueError("bookmark head must be >= 0")
    path = bookmark_path(queue_dir, name)
    fileio.make_dirs(os.path.dirname(path), 0o700)
    fileio.write_atomic(path, encode_crc_text(_MAGIC, [str(head)]))


def read_bookmark(queue_dir: str, name: str) -> int | None:
    """The head recorded by bookmark ``name``, ``None`` if absent, ``0`` if damaged."""
    return _read(bookmark_path(queue_dir, name))


def _read(path: str, skipped: list[str] | None = None) -> int | None:
    try:
        raw = fileio.ops.read_file(path)
    except FileNotFoundError:
        return None
    except fileio.NotRegularFile as exc:
        # never a bookmark (those are written atomically, as regular files): skipped, so that
        # archiving goes on; said once per path, not at every archiving pass
        if skipped is not None:
            skipped.append(os.path.basename(path))
        if path not in _SKIPPED and len(_SKIPPED) < 1000:
            _SKIPPED.add(path)
            log.warning("%s %s: not a bookmark, skipped", path, exc.strerror)
        return None
    entries = decode_crc_text(raw, _MAGIC)
    if entries is not None and len(entries) == 1 and entries[0].isdigit():
        return int(entries[0])
    log.warning("bookmark %s is damaged; keeping every journal file until it is rewritten", path)
    return 0


def read_bookmarks(queue_dir: str, skipped: list[str] | None = None) -> dict[str, int]:
    """Every bookmark of the queue directory: ``{name: head}``; the names of the entries skipped
    as not regular files (a FIFO, a device, a socket) are appended to ``skipped`` if given."""
    d = os.path.join(queue_dir, BOOKMARK_DIR)
    try:
        entries = os.listdir(d)
    except FileNotFoundError:
        return {}
    out = {}
    for entry in entries:
        if entry.startswith("."):
            continue  # temp files of an atomic replace in progress
        head = _read(os.path.join(d, entry), skipped)
        if head is not None:
            out[entry] = head
    return out


def remove_bookmark(queue_dir: str, name: str) -> bool:
    """Delete bookmark ``name``; return whether it existed."""
    try:
        fileio.ops.unlink(bookmark_path(queue_dir, name))
    except FileNotFoundError:
        return False
    return True
