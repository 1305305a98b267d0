"""Recovery policy: what a damaged journal file becomes, per ``QueueConfig.recovery`` mode.

:func:`scan_file` walks one journal file's bytes (already in memory) with the one record walker
(log/walker.py), salvage-style: it finds every damaged span and every valid record after it,
without deciding anything.  :func:`plan` then applies a mode and says where the file ends and
which spans are skipped, or raises :class:`CorruptJournal`.  No I/O here: the journal at open
(log/opening.py) and ``journaled check``/``repair`` (offline/repair.py) share this one definition of damage.
"""

from __future__ import annotations

from bisect import bisect_left

import attrs

from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.format import compressed
from journaled.format.record import FileHeader, Unit, decode_one
from journaled.log.walker import FileWalker, Span

#: The modes of ``QueueConfig.recovery``.
MODES = ("salvage", "point_in_time", "tolerate_tail", "strict")


@attrs.frozen
class FileScan:
    """Everything valid and everything damaged in one journal file."""

    size: int
    #: (id, offset, add_ms) of every valid PUT, in order; a unit taken on its CRC alone
    #: (``trust_units``) has an entry for its first and one for its last id, add_ms ``UNKNOWN_MS``
    records: list[tuple[int, int, int]]
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


#: The add time of a unit's items that were not inflated (``trust_units``).
UNKNOWN_MS = -1


def scan_file(
    data: bytes, header: FileHeader, path: str = "<journal>", trust_units: bool = False
) -> FileScan:
    """Decode every record of a journal file, locating damage and the valid records after it.
    A record this version must not skip raises :class:`UnsupportedVersion` (of its kind, named by
    ``path``) at it ([F-11], [F-44]).  ``trust_units``: a compressed unit whose CRC verifies is
    taken as its ids ([F-16]) without being inflated, so damage inside it ([F-45]) is not found
    here (a reader finds it when it gets there)."""
    records: list[tuple[int, int, int]] = []
    spans: list[Span] = []
    trusted: list[tuple[Unit, int]] | None = [] if trust_units else None

    def report(span: Span, rest: bytes) -> bool:
        spans.append(span)
        return True  # keep going: the mode decides later what the spans mean

    walker = FileWalker(
        lambda n, off: data[off : off + n],
        header.salt,
        header.size,
        len(data),
        header.first_id,
        report,
        chunk=max(1, len(data)),
        trusted=trusted,
    )
    while True:
        try:
            batch = walker.read_batch(max_bytes=1 << 62)
        except UnsupportedVersion as exc:
            raise type(exc)(path, exc.offset, exc.reason) from None
        got = [(r.id, r.offset, r.add_ms) for r in batch]
        if trusted:
            _insert_units(got, trusted)
            trusted.clear()
        if not got:
            break
        records += got
    return FileScan(len(data), records, spans)


def _insert_units(got: list[tuple[int, int, int]], trusted: list[tuple[Unit, int]]) -> None:
    """Put the entries of the units taken on their CRC among a batch's records, by offset."""
    offsets = [r[1] for r in got]
    for unit, first in reversed(trusted):  # from the back: the places found before stay right
        at = bisect_left(offsets, unit.offset)
        if first == unit.last_id:
            got[at:at] = [(first, unit.offset, UNKNOWN_MS)]
        else:
            got[at:at] = [(first, unit.offset, UNKNOWN_MS), (unit.last_id, unit.offset, UNKNOWN_MS)]


def scan_for_open(data: bytes, header: FileHeader, path: str, mode: str) -> FileScan:
    """:func:`scan_file` as opening needs it: in ``salvage`` mode (which keeps every valid
    record whatever damage lies between, and finds damage in files it did not scan when a
    reader gets there) the compressed units are taken on their CRC ([F-16]), except the last
    one kept, which is inflated for its items' add times (they never go backwards, so its last
    one is the file's latest); a last unit whose content is damaged ([F-45]) makes it scan the
    whole file.  Other modes promise to find damage at open: they inflate every unit."""
    if mode != "salvage" or not compressed.available():
        return scan_file(data, header, path)
    scan = scan_file(data, header, path, trust_units=True)
    end = plan(scan, mode, path, True).end
    k = bisect_left([r[1] for r in scan.records], end) - 1  # the last entry kept
    if k < 0 or scan.records[k][2] != UNKNOWN_MS:
        return scan
    off = scan.records[k][1]
    unit = decode_one(data, off, 0, header.salt)
    got = compressed.unit_contents(unit, header.salt) if isinstance(unit, Unit) else "not a unit"
    if isinstance(got, str):
        return scan_file(data, header, path)  # found as damage, exactly as a full scan finds it
    ms = got[0][-1].add_ms
    while k >= 0 and scan.records[k][1] == off:
        scan.records[k] = (scan.records[k][0], off, ms)
        k -= 1
    return scan


def lost_ids(
    scan: FileScan, span: Span, first_id: int, next_first: int | None = None
) -> tuple[int, int] | None:
    """Inclusive range of ids lost in ``span``: between the last valid record before it and the
    first one after it, or ``next_first`` (the next file's first id) when nothing valid follows
    in this file.  Ids are consecutive, so the gap is exact even when the damaged bytes say
    nothing.  None when no id is known to be missing."""
    end = span.resume if span.resume is not None else scan.size
    before = [r[0] for r in scan.records if r[1] < span.offset]
    after = [r[0] for r in scan.records if r[1] >= end]
    lo = before[-1] + 1 if before else first_id
    hi = after[0] if after else next_first
    return (lo, hi - 1) if hi is not None and hi > lo else None


def plan(scan: FileScan, mode: str, path: str, newest: bool) -> Plan:
    """Apply recovery ``mode`` to one scanned file, or raise :class:`CorruptJournal`.

    * ``salvage`` (the default): inner spans are skipped (exactly the damaged bytes; the walk
      resynchronises on the next record that validates at its own position), only a final
      span is cut.
    * ``point_in_time``: the file ends at its first span.
    * ``tolerate_tail``: only a final span of the newest file may be cut; anything else refuses.
    * ``strict``: any span refuses.
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
