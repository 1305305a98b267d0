"""Recovery policy: what a damaged journal file becomes, per ``QueueConfig.recovery`` mode.

:func:`scan_file` reads one journal file's bytes salvage-style (it finds every damaged span and
every valid record after it) without deciding anything; :func:`plan` then applies a mode and says
where the file ends and which spans are skipped, or raises :class:`CorruptJournal`.  Keeping the
two apart lets the journal (at open and while reading), ``journaled check`` and ``journaled
repair`` share one definition of "damage".
"""

from __future__ import annotations

import os

import attrs

from journaled.errors import CorruptJournal
from journaled.record import FileHeader, Put, decode_many, find_next_record

#: The modes of ``QueueConfig.recovery``.
MODES = ("point_in_time", "tolerate_tail", "strict", "salvage")


@attrs.frozen
class Span:
    """Damaged bytes ``offset..resume`` (``resume`` is None: damage runs to the end of the file)."""

    offset: int
    resume: int | None
    reason: str
    incomplete: bool  # the bytes simply end inside a record (a torn append)


@attrs.frozen
class FileScan:
    """Everything valid and everything damaged in one journal file."""

    size: int
    records: list[tuple[int, int, int]]  # (id, offset, add_ms) of every valid PUT, in order
    spans: list[Span]

    @property
    def clean(self) -> bool:
        return not self.spans

    def max_id(self) -> int | None:
        return max((r[0] for r in self.records), default=None)


@attrs.frozen
class Plan:
    """The outcome of one mode on one file: keep records below ``end`` outside ``skipped``."""

    end: int  # the file is valid up to here; bytes beyond are cut
    skipped: list[Span]  # spans inside [0, end) that are skipped (salvage only)
    cut: Span | None  # the span at ``end`` that made us cut (None: nothing cut)


def scan_file(data: bytes, header: FileHeader, max_body: int) -> FileScan:
    """Decode every record of a journal file, locating damage and the valid records after it."""
    pos = header.size
    expected = header.first_id
    records: list[tuple[int, int, int]] = []
    spans: list[Span] = []
    while True:
        recs, pos, damage = decode_many(data, 0, header.salt, pos, max_body)
        for rec in recs:
            if isinstance(rec, Put):
                records.append((rec.id, rec.offset, rec.add_ms))
                expected = rec.id + 1
        if damage is None:
            break
        nxt = find_next_record(data, pos + 1, 0, header.salt, expected, max_body)
        spans.append(Span(pos, nxt, damage.reason, damage.incomplete))
        if nxt is None:
            break
        pos = nxt
    return FileScan(len(data), records, spans)


def is_torn_tail(span: Span, data: bytes) -> bool:
    """A span that ends the file and looks like an interrupted append (incomplete, or zeros)."""
    return span.resume is None and (span.incomplete or not any(data[span.offset :]))


def plan(scan: FileScan, mode: str, path: str, newest: bool) -> Plan:
    """Apply recovery ``mode`` to one scanned file, or raise :class:`CorruptJournal`.

    * ``strict``: any span refuses.
    * ``tolerate_tail``: only a final span of the newest file may be cut; anything else refuses.
    * ``point_in_time``: the file ends at its first span.
    * ``salvage``: inner spans are skipped, only a final span is cut.
    """
    if not scan.spans:
        return Plan(scan.size, [], None)
    first = scan.spans[0]
    last = scan.spans[-1]
    if mode == "strict":
        raise CorruptJournal(path, first.offset, f"{first.reason} (recovery='strict')")
    if mode == "tolerate_tail":
        if len(scan.spans) == 1 and first.resume is None and newest:
            return Plan(first.offset, [], first)
        where = (
            "damage before the last valid record"
            if first.resume is not None
            else "damaged tail of an older file"
        )
        raise CorruptJournal(path, first.offset, f"{first.reason}: {where} (recovery='tolerate_tail')")
    if mode == "point_in_time":
        return Plan(first.offset, [], first)
    if mode == "salvage":
        if last.resume is None:
            return Plan(last.offset, list(scan.spans[:-1]), last)
        return Plan(scan.size, list(scan.spans), None)
    raise ValueError(f"unknown recovery mode {mode!r}")


def ids_between(scan: FileScan, start: int, end: int) -> tuple[int, int] | None:
    """Inclusive range of valid ids whose records lie in ``[start, end)`` (None if none)."""
    ids = [r[0] for r in scan.records if start <= r[1] < end]
    return (min(ids), max(ids)) if ids else None


# --------------------------------------------------------------------------------------------
# Offline check and repair (``journaled check`` / ``journaled repair``)
# --------------------------------------------------------------------------------------------


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
    from journaled.record import decode_header

    with open(path, "rb") as f:
        return decode_header(f.read(512), path)


def check_dir(directory: str, name: str | None = None) -> CheckReport:
    """Scan every journal file and checkpoint of a queue directory without modifying anything."""
    from journaled import checkpoint as ckp
    from journaled.journal import MAX_RECORD_BODY, list_journal_files
    from journaled.journal import detect_queue_name
    from journaled.record import decode_checkpoint

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
        scan = scan_file(data, header, MAX_RECORD_BODY)
        records += len(scan.records)
        if prev_end is not None and header.first_id > prev_end:
            gap = (prev_end, header.first_id - 1)
            findings.append(Finding(path, 0, "id-gap", "ids missing between files", 0, gap))
        for span in scan.spans:
            end = span.resume if span.resume is not None else len(data)
            torn = newest and is_torn_tail(span, data)
            after = [r[0] for r in scan.records if r[1] >= end]
            before = [r[0] for r in scan.records if r[1] < span.offset]
            lo = before[-1] + 1 if before else header.first_id
            lost = (lo, after[0] - 1) if after and after[0] > lo else None
            kind = "torn-tail" if torn else "damage"
            findings.append(Finding(path, span.offset, kind, span.reason, end - span.offset, lost))
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
    from journaled.record import decode_one, encode_header, encode_put

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
    import fcntl
    import shutil
    import time

    from journaled import checkpoint as ckp
    from journaled import fileio
    from journaled.errors import QueueLocked
    from journaled.journal import MAX_RECORD_BODY, list_journal_files
    from journaled.queue import LOCK_FILE

    if mode not in ("salvage", "point_in_time"):
        raise ValueError("repair mode must be 'salvage' or 'point_in_time'")
    lock_fd = os.open(os.path.join(directory, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            try:
                pid = int(os.pread(lock_fd, 32, 0).decode().strip() or 0)
            except (ValueError, OSError):
                pid = 0
            raise QueueLocked(directory, pid or None) from None
        report = check_dir(directory, name)
        name = report.name
        backup = os.path.join(directory, "repair-" + time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
        actions: list[str] = []
        damaged = {f.path for f in report.findings if f.kind != "id-gap"}
        if not damaged:
            return "", ["nothing to repair"]
        os.makedirs(backup, exist_ok=True)

        def keep_original(path: str) -> None:
            shutil.copy2(path, os.path.join(backup, os.path.basename(path)))

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
            scan = scan_file(data, header, MAX_RECORD_BODY)
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
        os.close(lock_fd)
