"""Opening a journal: list its files, read their headers, apply the recovery plan, find the next id.

Opening scans only the newest file completely (to find a torn tail and the next id); older files
are known by their headers, so opening a large journal costs one header read per file plus one
file scan (``strict`` and ``tolerate_tail`` verify every file, as they promise to refuse damage
up front).  What damage becomes is decided by log/recoveryplan.py's :func:`~journaled.log.recoveryplan.plan`;
this module carries it out (cutting, setting aside, reporting) and keeps every byte it drops in a
``*.damaged`` file first.  Runs before the journal is shared, so it takes no lock.
"""

from __future__ import annotations

import logging
import os

from journaled.disk import fileio
from journaled.disk.layout import inspect_journal, is_ours, list_journal_files
from journaled.errors import CorruptJournal, ForeignFile
from journaled.format.record import header_size
from journaled.log import recoveryplan
from journaled.log.state import JournalFile, LogState, RecoveryEvent, keep_aside, now_ms
from journaled.log.writer import Writer

log = logging.getLogger("journaled")


def open_journal(state: LogState, writer: Writer, id_floor: int) -> None:
    """Recover the files of ``state`` (or create the first one) and install them, the next id
    and the latest add time with :meth:`LogState.opened`.

    ``id_floor``: ids below it have been handed out before (the queue derives it from its
    readers' checkpoints).  If recovery lost the journal's tail, or every file, new items still
    start at or above it, so an id is never given to two different items.
    """
    mode = state.config.recovery
    found = list_journal_files(state.directory, state.name)
    files: list[JournalFile] = []
    aside: list[tuple[int, str, str, int]] = []  # (its place among ``files``, path, reason, size)
    for k, (ms, path) in enumerate(found):
        newest = k == len(found) - 1
        check = inspect_journal(path, state.name, ms)  # raises UnsupportedVersion: never guessed at
        if not is_ours(check, state.name, ms):
            raise ForeignFile(
                path,
                f"named like a journal file of queue {state.name!r} but not written by journaled "
                f"({check.problem}, {check.size} bytes); it is left untouched: move it out of the "
                "directory",
            )
        if check.header is None:
            # A newest file no longer than a header is a creation interrupted before its first
            # record: a torn tail, nothing in it was ever acknowledged.
            torn = newest and check.size <= header_size(state.name)
            if mode == "strict" or (mode == "tolerate_tail" and not torn):
                raise CorruptJournal(path, 0, f"{check.problem} (recovery={mode!r})")
            _set_aside(state, path)
            aside.append((len(files), path, check.problem or "unreadable header", check.size))
            continue
        if check.problem is not None:
            if mode in ("strict", "tolerate_tail"):
                raise CorruptJournal(path, 0, f"{check.problem} (recovery={mode!r})")
            state.report(RecoveryEvent(path, 0, "recovered-header", check.problem, 0))
            log.warning("journal file %s: damaged header (%s) rebuilt from its records", path, check.problem)
        files.append(JournalFile(path, ms, check.header, check.size))
    for at, path, reason, size in aside:  # reported once the files around each are known
        lost = _ids_between(files, at)
        state.report(RecoveryEvent(path, 0, "skipped-file", reason, size, lost, kept=path + ".damaged"))
        log.warning(
            "journal file %s is unreadable (%s); moved to %s.damaged; ids lost: %s",
            path,
            reason,
            path,
            "unknown" if lost is None else lost,
        )
    if not files:
        state.opened(files, max(1, id_floor), 0)
        writer.create_file_locked(now_ms())
        return
    last_add_ms = 0
    if mode in ("strict", "tolerate_tail"):
        for jf in files[:-1]:
            last_add_ms = max(last_add_ms, _recover_file(state, jf, newest=False)[2])
    next_id, skip_to, newest_add_ms = _recover_file(state, files[-1], newest=True)
    last_add_ms = max(last_add_ms, newest_add_ms)
    if id_floor > max(skip_to, next_id):
        log.warning(
            "%s: readers have seen ids up to %d but the journal ends at %d (lost tail); "
            "new items start at %d",
            state.directory,
            id_floor - 1,
            next_id - 1,
            id_floor,
        )
        skip_to = id_floor
    # ids of valid records cut off by point-in-time recovery are never reused: such a journal
    # continues in a new file whose first id is past them
    state.opened(files, max(next_id, skip_to), last_add_ms)
    if skip_to > next_id:
        writer.create_file_locked(now_ms())
    else:
        writer.continue_file(files[-1])


def _set_aside(state: LogState, path: str) -> None:
    """Move an unreadable file out of the journal, keeping its bytes for inspection."""
    fileio.ops.rename(path, path + ".damaged")
    fileio.ops.fsync_dir(state.directory)


def _ids_between(files: list[JournalFile], at: int) -> tuple[int, int] | None:
    """The ids files set aside just before ``files[at]`` held ([F-19]): after the last record
    of the file before them, up to the first id of the file after them; ``None`` (unknown) with
    no file before (older ones may have been archived) or none after.  Reads the file before
    them to its end: older files are otherwise known by their headers only."""
    if at == 0 or at >= len(files):
        return None
    before, after = files[at - 1], files[at]
    scan = recoveryplan.scan_file(fileio.ops.read_file(before.path), before.header, before.path)
    last = scan.max_id()
    first = before.first_id if last is None else last + 1
    return (first, after.first_id - 1) if first < after.first_id else None


def _recover_file(state: LogState, jf: JournalFile, newest: bool) -> tuple[int, int, int]:
    """Scan one file completely, apply the recovery mode and index it.  Returns ``(next id
    after its last kept record, smallest id never used, latest add time kept (0 if none))``."""
    data = fileio.ops.read_file(jf.path)
    scan = recoveryplan.scan_for_open(data, jf.header, jf.path, state.config.recovery)
    plan = recoveryplan.plan(scan, state.config.recovery, jf.path, newest)
    expected = jf.first_id
    last_add_ms = 0
    for item_id, offset, add_ms in scan.records:
        if offset >= plan.end:
            break
        jf.note(item_id, offset)
        expected = item_id + 1
        last_add_ms = max(last_add_ms, add_ms)
    for span in plan.skipped:
        assert span.resume is not None
        lost = recoveryplan.lost_ids(scan, span, jf.first_id)
        state.report(
            RecoveryEvent(
                jf.path, span.offset, "skipped-damage", span.reason, span.resume - span.offset, lost
            )
        )
        log.warning(
            "%s: damaged bytes %d..%d skipped (%s); ids lost: %s",
            jf.path,
            span.offset,
            span.resume,
            span.reason,
            lost,
        )
    max_id = scan.max_id()
    skip_to = max(expected, (max_id or 0) + 1)
    if plan.cut is not None:
        cut = len(data) - plan.end
        torn = plan.cut.torn
        lost = (expected, max_id) if max_id is not None and max_id >= expected else None
        kept = None if torn else keep_aside(state, jf.path, plan.end, data[plan.end :])
        action = "truncated-tail" if torn else "cut-at-damage"
        state.report(RecoveryEvent(jf.path, plan.end, action, plan.cut.reason, cut, lost, kept=kept))
        log.warning(
            "%s: cut %d bytes at offset %d (%s, recovery=%r); ids lost: %s; kept in %s",
            jf.path,
            cut,
            plan.end,
            plan.cut.reason,
            state.config.recovery,
            lost,
            kept,
        )
        fd = fileio.ops.open(jf.path, os.O_WRONLY, state.config.file_mode)
        try:
            fileio.ops.ftruncate(fd, plan.end)
            fileio.ops.fsync(fd)
        finally:
            fileio.ops.close(fd)
    jf.end_at(plan.end)
    return expected, skip_to, last_add_ms
