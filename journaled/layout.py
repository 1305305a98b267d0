"""Names of the files in a queue directory, and which queue a directory holds.

``<queue>.<creation ms>`` journal files, ``<queue>.read.<reader>`` checkpoints (checkpoint.py),
``<queue>.readers``, ``.journaled.lock`` (dirlock.py), ``spool/`` (spoolfile.py),
``external/`` (bookmarks.py).  docs/format.md lists them all.
"""

from __future__ import annotations

import os
import re

from journaled.config import validate_name
from journaled.errors import InvalidName

_FILE_RE_CACHE: dict[str, re.Pattern[str]] = {}
_ANY_JOURNAL_RE = re.compile(r"(.+)\.(\d{1,20})")


def journal_file_re(name: str) -> re.Pattern[str]:
    """The file names of queue ``name``'s journal files (the number is the creation ms)."""
    pat = _FILE_RE_CACHE.get(name)
    if pat is None:
        pat = _FILE_RE_CACHE[name] = re.compile(re.escape(name) + r"\.(\d{1,20})")
    return pat


def journal_path(directory: str, name: str, ms: int) -> str:
    return os.path.join(directory, f"{name}.{ms}")


def list_journal_files(directory: str, name: str) -> list[tuple[int, str]]:
    """``(ms, path)`` of every journal file of queue ``name`` in ``directory``, oldest first."""
    pat = journal_file_re(name)
    found = []
    for entry in os.listdir(directory):
        m = pat.fullmatch(entry)
        if m:
            found.append((int(m.group(1)), os.path.join(directory, entry)))
    found.sort()
    return found


def detect_queue_name(directory: str) -> str:
    """The queue name of an existing directory (from its journal files), else its basename
    (or ``queue`` when the basename is not a valid name)."""
    names = set()
    for entry in os.listdir(directory):
        m = _ANY_JOURNAL_RE.fullmatch(entry)
        if m and not entry.startswith("."):
            names.add(m.group(1))
    # a reader named with digits only ("<queue>.read.7") looks like a journal of "<queue>.read"
    names = {n for n in names if not any(n.startswith(m + ".read.") or n == m + ".read" for m in names)}
    valid = []
    for n in names:
        try:
            valid.append(validate_name(n))
        except InvalidName:
            pass
    if len(valid) == 1:
        return valid[0]
    if len(valid) > 1:
        raise InvalidName(f"{directory!r} holds journals of several queues {sorted(valid)}; pass name=")
    base = os.path.basename(os.path.abspath(directory))
    try:
        return validate_name(base, "queue name")
    except InvalidName:
        return "queue"
