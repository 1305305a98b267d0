"""Intents: how a publisher of several spool batch files makes them one publication.

A publisher (the Spark sink's driver) stages its batch files in ``spool/staging/``, writes an
intent naming them (``spool/staging/<sha256 of the key, 40 hex>.intent``, one staged name per
line, written atomically and fsynced), renames each into the spool, and removes the intent.  The
intent is the commit point: once it is on disk the whole publication is delivered, by the
publisher, by a replay of it holding the same key, or by the queue's owner, which finishes an
intent left alone for :data:`ORPHAN_AGE` seconds (its publisher died between the renames).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import time
from collections.abc import Sequence

from journaled.disk import fileio
from journaled.disk.spoolfiles import STAGING, publish, spool_dir

INTENT_SUFFIX = ".intent"
#: Seconds after which the owner takes an intent still on disk for its dead publisher's and
#: finishes it (a live publisher renames its parts within moments of writing the intent).
ORPHAN_AGE = 60.0


def _intent_path(queue_dir: str | os.PathLike[str], key: str) -> str:
    # the key comes from users (a sinkId): only its hash names a file, so it never escapes staging/
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:40]
    return os.path.join(spool_dir(queue_dir), STAGING, digest + INTENT_SUFFIX)


def write_intent(queue_dir: str | os.PathLike[str], key: str, staged: Sequence[str]) -> None:
    """Durably record that the staged batch files ``staged`` (in ``spool/staging/``, in this
    order) are about to be published as the batch ``key``: a publisher that dies between their
    renames is finished by the next one holding the same key (:func:`read_intent`)."""
    names = [os.path.basename(p) for p in staged]
    fileio.write_atomic(_intent_path(queue_dir, key), "".join(n + "\n" for n in names).encode("utf-8"))


def read_intent(queue_dir: str | os.PathLike[str], key: str) -> list[str] | None:
    """The staged files an unfinished publication of ``key`` still has to rename into the spool
    (those already renamed are gone from staging and left out); None when there is no intent.
    Only plain staged names are taken: nothing outside ``staging/``, no dot name, no link."""
    return _intent_parts(_intent_path(queue_dir, key))


def orphaned_intents(queue_dir: str | os.PathLike[str], older_than: float) -> list[str]:
    """The intent files in ``spool/staging/`` last written more than ``older_than`` seconds ago:
    publications whose publisher died between its renames (a live one renames its parts within
    moments of writing the intent).  Regular files only; nothing is followed."""
    staging = os.path.join(spool_dir(queue_dir), STAGING)
    try:
        names = os.listdir(staging)
    except (FileNotFoundError, NotADirectoryError):
        return []
    out = []
    cutoff = time.time() - older_than
    for name in names:
        if not name.endswith(INTENT_SUFFIX) or name.startswith("."):
            continue
        full = os.path.join(staging, name)
        with contextlib.suppress(FileNotFoundError):
            st = os.lstat(full)
            if stat.S_ISREG(st.st_mode) and st.st_mtime < cutoff:
                out.append(full)
    return sorted(out)


def finish_intent(intent: str, queue_dir: str | os.PathLike[str]) -> int:
    """Rename into the spool, in order, the staged files the intent file ``intent`` still names
    (a publisher that renames one too is tolerated), then remove the intent; returns how many
    this call renamed.  The intent was durable before the first rename, so the batch it names
    is delivered whole."""
    done = 0
    for part in _intent_parts(intent) or ():
        try:
            publish(part, queue_dir)
        except FileNotFoundError:  # its publisher renamed it meanwhile
            continue
        done += 1
    with contextlib.suppress(FileNotFoundError):
        fileio.ops.unlink(intent)
    return done


def _intent_parts(path: str) -> list[str] | None:
    try:
        raw = fileio.read_nofollow(path)
    except FileNotFoundError:
        return None
    staging = os.path.dirname(path)
    out = []
    for name in raw.decode("utf-8", "replace").splitlines():
        if not name.endswith(".part") or name.startswith(".") or os.sep in name or "\0" in name:
            continue
        full = os.path.join(staging, name)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISREG(os.lstat(full).st_mode):
                out.append(full)
    return out


def clear_intent(queue_dir: str | os.PathLike[str], key: str) -> None:
    """Forget the intent to publish ``key`` (every one of its files is in the spool)."""
    with contextlib.suppress(FileNotFoundError):
        fileio.ops.unlink(_intent_path(queue_dir, key))
