"""Offline check and repair of a queue directory (``journaled check`` / ``journaled repair``).

Both read journal files through recovery.py's :func:`~journaled.recovery.scan_file` (the one
record walker), so "damage" means exactly what it means when the queue opens.  ``repair`` owns
the directory while it works (dirlock.py) and copies every file it changes into a backup folder
first.
"""

from __future__ import annotations

import os
import time

import attrs

from journaled import checkpoint as ckp
from journaled import fileio
from journaled.dirlock import DirLock
from journaled.errors import CorruptJournal
from journaled.filecodec import decode_checkpoint
from journaled.layout import detect_queue_name, list_journal_files
from journaled.record import FileHeader, Put, decode_header, decode_one, encode_header, encode_put
from journaled.recovery import lost_ids, plan, scan_file


@attrs.frozen
class Finding:
    """One problem ``check`` found.  ``kind``: ``torn-tail`` (an interrupted append at the end of
    the newest file: cut harmlessly on open), ``damage`` (bad bytes in a journal file),
    ``bad-header``, ``bad-checkpoint``, ``bad-registry`` or ``id-gap`` (ids missing between
    files)."""

    path: str
    offset: int
    kind: str
    reason: str
    bytes: int = 0
    ids_lost: tuple[int, int] | None = None


@attrs.frozen
class CheckReport:
    name: str
    files: int
    records: int
    findings: list[Finding]

    @property
    def clean(self) -> bool:
        """No damage.  An ``id-gap`` alone is history, not damage: point-in-time recovery skips
        the ids it cut off for good, so the gap stays after a successful recovery."""
        return all(f.kind == "id-gap" for f in self.findings)


def _header_of(path: str) -> FileHeader:
    with open(path, "rb") as f:
        return decode_header(f.read(512), path)


def check_dir(directory: str, name: str | None = None) -> CheckReport:
    """Scan every journal file and checkpoint of a queue directory without modifying anything."""
    name = name or detect_queue_name(directory)
    findings: list[Finding] = []
    files = list_journal_files(directory, name)
    records = 0
    prev_end: int | None = None
    for k, (_ms, path) in enumerate(files):
        newest = k == len(files) - 1
        try:
            header = _header_of(path)
        except CorruptJournal as exc:
            findings.append(Finding(path, exc.offset, "bad-header", exc.reason, os.path.getsize(path)))
            prev_end = None
            continue
        with open(path, "rb") as f:
            data = f.read()
        scan = scan_file(data, header)
        records += len(scan.records)
        if prev_end is not None and header.first_id > prev_end:
            gap = (prev_end, header.first_id - 1)
            findings.append(Finding(path, 0, "id-gap", "ids missing between files", 0, gap))
        for span in scan.spans:
            kind = "torn-tail" if newest and span.torn else "damage"
            lost = lost_ids(scan, span, header.first_id)
            findings.append(Finding(path, span.offset, kind, span.reason, span.length(len(data)), lost))
        mx = scan.max_id()
        prev_end = (mx + 1) if mx is not None else header.first_id
    for reader in ckp.list_checkpoints(directory, name):
        path = ckp.checkpoint_path(directory, name, reader)
        try:
            with open(path, "rb") as f:
                decode_checkpoint(f.read(), path)
        except CorruptJournal as exc:
            findings.append(Finding(path, exc.offset, "bad-checkpoint", exc.reason, os.path.getsize(path)))
    reg = ckp.registry_path(directory, name)
    if os.path.exists(reg) and ckp.read_registry(reg) is None:
        findings.append(Finding(reg, 0, "bad-registry", "registry damaged", os.path.getsize(reg)))
    return CheckReport(name, len(files), records, findings)


def _rebuild(path: str, data: bytes, header: FileHeader, keep: list[tuple[int, int, int]]) -> bytes:
    """The file re-encoded with only the records at ``keep`` offsets (CRCs are seeded by
    position, so every moved record is encoded afresh)."""
    out = bytearray(encode_header(header))
    for _id, offset, _ms in keep:
        rec = decode_one(data, offset, 0, header.salt)
        assert isinstance(rec, Put)
        out += encode_put(header.salt, len(out), rec.id, rec.add_ms, rec.expire_ms, rec.payload)
    return bytes(out)


def repair_dir(directory: str, mode: str = "salvage", name: str | None = None) -> tuple[str, list[str]]:
    """Rewrite a queue directory offline so it opens cleanly under any recovery mode.

    Takes the directory lock (raises :class:`~journaled.errors.QueueLocked` when a live process
    holds it).  Every file changed or removed is first copied into ``repair-<UTC time>/`` inside
    the directory.  ``mode`` is ``salvage`` (keep every valid record) or ``point_in_time`` (keep
    each file up to its first damage).  Returns ``(backup directory, actions)``.
    """
    if mode not in ("salvage", "point_in_time"):
        raise ValueError("repair mode must be 'salvage' or 'point_in_time'")
    lock = DirLock.acquire(directory)
    try:
        report = check_dir(directory, name)
        name = report.name
        backup = os.path.join(directory, "repair-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        actions: list[str] = []
        damaged = {f.path for f in report.findings if f.kind != "id-gap"}
        if not damaged:
            return "", ["nothing to repair"]
        fileio.make_dirs(backup, 0o700)

        def keep_original(path: str) -> None:
            # durable before the original is rewritten or removed
            fileio.copy_file(path, os.path.join(backup, os.path.basename(path)))

        files = list_journal_files(directory, name)
        for k, (_ms, path) in enumerate(files):
            if path not in damaged:
                continue
            keep_original(path)
            try:
                header = _header_of(path)
            except CorruptJournal:
                os.unlink(path)
                actions.append(f"moved {os.path.basename(path)} (unreadable header) to {backup}")
                continue
            with open(path, "rb") as f:
                data = f.read()
            scan = scan_file(data, header)
            p = plan(scan, mode, path, k == len(files) - 1)
            keep = [r for r in scan.records if r[1] < p.end]
            rebuilt = _rebuild(path, data, header, keep)
            fileio.write_atomic(path, rebuilt)
            actions.append(
                f"rewrote {os.path.basename(path)}: kept {len(keep)} of {len(scan.records)} valid records "
                f"({len(data) - len(rebuilt)} bytes dropped, damage in {len(scan.spans)} place(s))"
            )
        for finding in report.findings:
            if finding.kind == "bad-checkpoint":
                keep_original(finding.path)
                os.unlink(finding.path)
                actions.append(
                    f"moved damaged checkpoint {os.path.basename(finding.path)} aside (the reader replays)"
                )
        names = ckp.list_checkpoints(directory, name)
        reg = ckp.registry_path(directory, name)
        if reg in damaged:
            keep_original(reg)
            ckp.write_registry(reg, names, 0o600)
            actions.append("rewrote the reader registry from the checkpoint files")
        elif any(x.kind == "bad-checkpoint" for x in report.findings):
            registered = ckp.read_registry(reg) or []
            ckp.write_registry(reg, sorted(set(registered) | set(names)), 0o600)
        fileio.ops.fsync_dir(directory)
        return backup, actions
    finally:
        lock.release()
