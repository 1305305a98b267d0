"""Recovery policy: what a damaged journal file becomes, per ``QueueConfig.recovery`` mode.

:func:`scan_file` reads one journal file's bytes salvage-style (it finds every damaged span and
every valid record after it) without deciding anything; :func:`plan` then applies a mode and says
where the file ends and which spans are skipped, or raises :class:`CorruptJournal`.  Keeping the
two apart lets the journal (at open and while reading), ``journaled check`` and ``journaled
repair`` share one definition of "damage".
"""

from __future__ import annotations

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
        where = "damage before the last valid record" if first.resume is not None else "damaged tail of an older file"
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
