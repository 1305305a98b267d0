"""Offline check and repair of a queue directory (``journaled check`` / ``journaled repair``).

Both read journal files through log/recoveryplan.py's :func:`~journaled.log.recoveryplan.scan_file` (the one
record walker), so "damage" means exactly what it means when the queue opens.  ``repair`` owns
the directory while it works (disk/dirlock.py) and copies every file it changes into a backup folder
first.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time

import attrs

from journaled.disk import checkpointfiles as ckp
from journaled.disk import fileio, lease
from journaled.disk.dirlock import DirLock, owner_pid
from journaled.disk.layout import HeaderCheck, detect_queue_name, inspect_journal, is_ours, list_journal_files
from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.format import compressed
from journaled.format.record import (
    FileHeader,
    Put,
    PutX,
    Unit,
    decode_one,
    encode_header,
    encode_put,
    encode_putx,
    header_size,
)
from journaled.format.smallfiles import decode_checkpoint
from journaled.log.recoveryplan import FileScan, lost_ids, plan, scan_file
from journaled.log.walker import Span


@attrs.frozen
class Finding:
    """One problem ``check`` found.  ``kind``: ``torn-tail`` (an interrupted append at the end of
    the newest file: cut harmlessly on open), ``damage`` (bad bytes in a journal file),
    ``damaged-header`` (a journal header rebuilt from the records: nothing lost),
    ``bad-header`` (a journal file that cannot be read at all), ``foreign-file`` (a file named
    like a journal file that journaled did not write: the open refuses), ``bad-checkpoint``,
    ``bad-registry`` or ``id-gap`` (ids missing between files).  ``on_open`` says what opening
    with the default recovery mode (``salvage``) does about it."""

    path: str
    offset: int
    kind: str
    reason: str
    bytes: int = 0
    ids_lost: tuple[int, int] | None = None
    on_open: str = ""


@attrs.frozen
class CheckReport:
    name: str
    files: int
    records: int
    findings: list[Finding]

    @property
    def clean(self) -> bool:
        """No damage.  An ``id-gap`` alone is history, not damage: recovery never reuses the
        ids it lost, so the gap stays after a successful recovery."""
        return all(f.kind == "id-gap" for f in self.findings)


def _header_of(path: str, name: str, ms: int) -> FileHeader | None:
    check = inspect_journal(path, name, ms)
    return check.header if check.ours else None


def _span_finding(
    path: str, span: Span, scan: FileScan, header: FileHeader, newest: bool, next_first: int | None
) -> Finding:
    lost = lost_ids(scan, span, header.first_id, next_first)
    size = span.length(scan.size)
    if span.resume is not None:
        return Finding(
            path, span.offset, "damage", span.reason, size, lost, "skipped; every later record is kept"
        )
    if newest and span.torn:
        return Finding(path, span.offset, "torn-tail", span.reason, size, lost, "cut (an interrupted append)")
    if newest:
        return Finding(
            path, span.offset, "damage", span.reason, size, lost, "cut; the bytes are kept in a .damaged file"
        )
    return Finding(path, span.offset, "damage", span.reason, size, lost, "skipped to the next file")


def check_dir(directory: str, name: str | None = None, live: bool | None = None) -> CheckReport:
    """Scan every journal file and checkpoint of a queue directory without modifying anything.

    Safe while a live process owns the queue: a file archived between listing and reading is
    skipped (not damage), and the end of the newest file (a header or a record being written)
    is not reported while the owner holds the directory (``live``; default: whether a process
    holds the directory lock now).
    """
    name = name or detect_queue_name(directory)
    if live is None:
        live = owner_pid(directory) is not None
    findings: list[Finding] = []
    listed = list_journal_files(directory, name)
    checks: list[tuple[str, HeaderCheck | None, bytes]] = []
    for ms, path in listed:
        try:
            check = inspect_journal(path, name, ms)
            data = b""
            if check.header is not None:
                with open(path, "rb") as f:
                    data = f.read()
        except FileNotFoundError:
            checks.append((path, None, b""))  # archived by the owner while we looked
            continue
        except UnsupportedVersion as exc:
            findings.append(
                Finding(
                    path,
                    exc.offset,
                    "unsupported-version",
                    exc.reason,
                    0,
                    None,
                    "refused (UnsupportedVersion)",
                )
            )
            continue
        if not check.ours and is_ours(check, name, ms):
            check = attrs.evolve(check, ours=True)  # a creation cut short: the open sets it aside
        checks.append((path, check, data))
    records = 0
    prev_end: int | None = None
    for k, (path, maybe, data) in enumerate(checks):
        if maybe is None:
            prev_end = None  # no id-gap across a file that was archived meanwhile
            continue
        check = maybe
        newest = path == listed[-1][1]
        header = check.header
        if not check.ours:
            findings.append(
                Finding(
                    path,
                    0,
                    "foreign-file",
                    f"not written by journaled ({check.problem})",
                    check.size,
                    None,
                    "refused (ForeignFile); the file is left untouched",
                )
            )
            continue
        if header is None:
            if live and newest:
                continue  # being created by the owner
            torn = newest and check.size <= header_size(name)
            kind = "torn-tail" if torn else "bad-header"
            nxt_check = checks[k + 1][1] if k + 1 < len(checks) else None
            nxt_first = nxt_check.header.first_id if nxt_check and nxt_check.header else None
            lost = (prev_end, nxt_first - 1) if prev_end and nxt_first and nxt_first > prev_end else None
            findings.append(
                Finding(
                    path,
                    0,
                    kind,
                    check.problem or "unreadable header",
                    check.size,
                    lost,
                    "set aside as <file>.damaged",
                )
            )
            prev_end = None
            continue
        if check.problem is not None:
            findings.append(
                Finding(
                    path,
                    0,
                    "damaged-header",
                    check.problem,
                    0,
                    None,
                    "header rebuilt from the records; nothing lost",
                )
            )
        scan = scan_file(data, header, path)
        records += len(scan.records)
        if prev_end is not None and header.first_id > prev_end:
            gap = (prev_end, header.first_id - 1)
            findings.append(Finding(path, 0, "id-gap", "ids missing between files", 0, gap, "nothing to do"))
        after = checks[k + 1][1] if k + 1 < len(checks) else None
        nxt = after.header if after is not None else None
        mx = scan.max_id()
        prev_end = (mx + 1) if mx is not None else header.first_id
        for span in scan.spans:
            if live and newest and span.resume is None:
                continue  # the end of the file the owner is appending to
            finding = _span_finding(path, span, scan, header, newest, nxt.first_id if nxt else None)
            findings.append(finding)
            if finding.ids_lost is not None:
                prev_end = max(prev_end, finding.ids_lost[1] + 1)  # reported here, not as a gap
    for reader in ckp.list_checkpoints(directory, name):
        path = ckp.checkpoint_path(directory, name, reader)
        try:
            # never through a link (UnsafeDirectory: refused as the journal's own files are),
            # never blocked by a FIFO planted in its place
            decode_checkpoint(fileio.read_nofollow(path), path)
        except FileNotFoundError:
            continue  # the reader was removed while we looked
        except fileio.NotRegularFile as exc:
            findings.append(
                Finding(
                    path,
                    0,
                    "bad-checkpoint",
                    str(exc.strerror),
                    0,
                    None,
                    "ignored; the reader replays from the oldest item",
                )
            )
        except CorruptJournal as exc:
            findings.append(
                Finding(
                    path,
                    exc.offset,
                    "bad-checkpoint",
                    exc.reason,
                    os.path.getsize(path),
                    None,
                    "ignored; the reader replays from the oldest item",
                )
            )
    reg = ckp.registry_path(directory, name)
    if os.path.exists(reg) and ckp.read_registry(reg) is None:
        findings.append(
            Finding(
                reg,
                0,
                "bad-registry",
                "registry damaged",
                os.path.getsize(reg),
                None,
                "ignored; the checkpoint files say which readers exist",
            )
        )
    return CheckReport(name, sum(1 for c in checks if c[1] is not None), records, findings)


def _rebuild(path: str, data: bytes, header: FileHeader, keep: list[tuple[int, int, int]]) -> bytes:
    """The file re-encoded with only the records at ``keep`` offsets (CRCs are seeded by
    position, so every moved record is encoded afresh; a compressed unit, whose items share its
    offset, stays one unit, its inner records re-encoded for its new offset)."""
    out = bytearray(encode_header(header))
    done: set[int] = set()
    for _id, offset, _ms in keep:
        if offset in done:
            continue  # another item of the same unit
        done.add(offset)
        rec = decode_one(data, offset, 0, header.salt)
        if isinstance(rec, Unit):
            items = compressed.decode_unit(rec, header.salt)
            assert not isinstance(items, str)  # the scan kept it: it decoded
            at = len(out)
            inner = _encode_items(compressed.unit_salt(header.salt, at), bytearray(), items)
            unit = compressed.encode_unit(header.salt, at, rec.first_id, rec.count, inner)
            if unit is not None:
                out += unit
            else:  # not smaller compressed at its new offset (a frame differs by its salts)
                _encode_items(header.salt, out, items)
            continue
        assert isinstance(rec, Put)
        _encode_items(header.salt, out, [rec])
    return bytes(out)


def _encode_items(salt: int, out: bytearray, items: list[Put]) -> bytearray:
    """``items`` appended to ``out`` as records at their offsets in it (``out`` is a file's bytes
    from offset 0, or a unit's inner bytes)."""
    for rec in items:
        if isinstance(rec, PutX):  # its key, headers and not-before are the item's as much as its bytes
            out += encode_putx(salt, len(out), rec.id, rec.add_ms, rec.expire_ms, rec.meta, rec.payload)
        else:
            out += encode_put(salt, len(out), rec.id, rec.add_ms, rec.expire_ms, rec.payload)
    return out


def repair_dir(directory: str, mode: str = "salvage", name: str | None = None) -> tuple[str, list[str]]:
    """Rewrite a queue directory offline so it opens cleanly under any recovery mode.

    Takes the directory lock (raises :class:`~journaled.errors.QueueLocked` when a live process
    holds it) and renews the lease for the whole run; raises
    :class:`~journaled.disk.lease.LeaseLost` (a :class:`~journaled.errors.QueueDirectoryGone`),
    writing nothing more, if another host took the directory over meanwhile.  Every file
    changed or removed is first copied into ``repair-<UTC time>/`` inside the directory.
    ``mode`` is ``salvage`` (keep every valid record) or ``point_in_time`` (keep each file up to
    its first damage).  Returns ``(backup directory, actions)``.
    """
    if mode not in ("salvage", "point_in_time"):
        raise ValueError("repair mode must be 'salvage' or 'point_in_time'")
    lock = DirLock.acquire(directory)
    # renewed for the whole run: a repair longer than the lease's expiry must not let another host
    # take the directory over while it still rewrites files (checked before each write)
    kept = lease.KeptRenewed(lock.lease)
    try:
        kept.start()
        report = check_dir(directory, name, live=False)
        name = report.name
        backup = os.path.join(directory, "repair-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        damaged = {f.path for f in report.findings if f.kind != "id-gap"}
        if not damaged:
            return "", ["nothing to repair"]
        kept.check()
        fileio.make_dirs(backup, 0o700)
        try:
            return _repair_into(directory, name, mode, report, backup, damaged, kept)
        except BaseException:
            with contextlib.suppress(OSError):
                os.rmdir(backup)  # refused before it kept anything: no empty folder left behind
            raise
    finally:
        kept.stop()
        lock.release()


def _repair_into(
    directory: str,
    name: str,
    mode: str,
    report: CheckReport,
    backup: str,
    damaged: set[str],
    kept: lease.KeptRenewed,
) -> tuple[str, list[str]]:
    """The body of :func:`repair_dir` once ``backup`` exists (under the lock, the lease kept)."""
    actions: list[str] = []

    def keep_original(path: str) -> None:
        # durable before the original is rewritten or removed; the caller writes next
        kept.check()
        fileio.copy_file(path, os.path.join(backup, os.path.basename(path)))

    files = list_journal_files(directory, name)
    foreign = {f.path for f in report.findings if f.kind in ("foreign-file", "unsupported-version")}
    for k, (ms, path) in enumerate(files):
        if path not in damaged or path in foreign:
            continue  # a file journaled did not write (or of another format) is never touched
        keep_original(path)
        header = _header_of(path, name, ms)
        if header is None:
            os.unlink(path)
            actions.append(f"moved {os.path.basename(path)} (unreadable header) to {backup}")
            continue
        with open(path, "rb") as f:
            data = f.read()
        scan = scan_file(data, header, path)
        p = plan(scan, mode, path, k == len(files) - 1)
        keep = [r for r in scan.records if r[1] < p.end]
        rebuilt = _rebuild(path, data, header, keep)
        kept.check()
        fileio.write_atomic(path, rebuilt)
        actions.append(
            f"rewrote {os.path.basename(path)}: kept {len(keep)} of {len(scan.records)} valid records "
            f"({len(data) - len(rebuilt)} bytes dropped, damage in {len(scan.spans)} place(s))"
        )
    for finding in report.findings:
        if finding.kind == "bad-checkpoint":
            if not _regular(finding.path, actions):
                continue
            keep_original(finding.path)
            os.unlink(finding.path)
            actions.append(
                f"moved damaged checkpoint {os.path.basename(finding.path)} aside (the reader replays)"
            )
    names = ckp.list_checkpoints(directory, name)
    reg = ckp.registry_path(directory, name)
    if reg in damaged:
        if _regular(reg, actions):
            keep_original(reg)
            ckp.write_registry(reg, names, 0o600)
            actions.append("rewrote the reader registry from the checkpoint files")
    elif any(x.kind == "bad-checkpoint" for x in report.findings):
        registered = ckp.read_registry(reg) or []
        kept.check()
        ckp.write_registry(reg, sorted(set(registered) | set(names)), 0o600)
    fileio.ops.fsync_dir(directory)
    return backup, actions


def _regular(path: str, actions: list[str]) -> bool:
    """Is ``path`` a regular file?  If not (a FIFO, a socket, a device planted at the name of a
    checkpoint or of the registry), it is left alone, and ``actions`` says so."""
    if stat.S_ISREG(os.lstat(path).st_mode):
        return True
    actions.append(
        f"left {os.path.basename(path)} alone: not a regular file (the queue reads nothing from it, "
        "and writes its own file in its place)"
    )
    return False
