"""Plan and read id ranges of a queue directory by byte ranges, without owning it.

This is what a distributed reader (the Spark source) needs on top of :mod:`journaled.offline.scan`:
find the newest complete record cheaply (read only the tail of the newest file), locate the
record of an id or of a time by bisection over byte offsets, and cut an id range into byte
ranges that independent tasks read without talking to each other.

Finding a record boundary from an arbitrary byte offset is sound because every record's CRC32C
is seeded with the file's random salt and the record's own offset (format/record.py): a byte sequence
that merely looks like a record, inside a payload or anywhere else, fails its check except with
probability 2**-32 per candidate offset, and ids must also lie in the file's range.  Nothing
here writes; records still being written (incomplete at the end of the newest file) are "not
yet", never delivered.  docs/spark.md explains the planning.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

import attrs

from journaled.disk.layout import detect_queue_name, inspect_journal, list_journal_files
from journaled.format import compressed
from journaled.format.record import (
    MAX_BODY,
    PUT_OVERHEAD,
    RECORD_HEADER_SIZE,
    TYPE_PUT,
    TYPE_PUTX,
    TYPE_PUTZ,
    UNIT_FIELDS_SIZE,
    FileHeader,
    Put,
    Unit,
    decode_one,
)
from journaled.log.walker import FileWalker, Span

#: Bytes read per probe when looking for a record boundary.
PROBE = 64 * 1024
CHUNK = 1 << 20
#: The type bytes of the records a reader delivers (PUT, PUTX: a PUT with metadata, and PUTZ: a
#: compressed unit of them).
_ITEM_TYPES = re.compile(b"[" + re.escape(bytes([TYPE_PUT, TYPE_PUTX, TYPE_PUTZ])) + b"]")
_ITEM_TYPE_SET = frozenset((TYPE_PUT, TYPE_PUTX, TYPE_PUTZ))
#: Ids a probe accepts from a file whose first id is ``f``: ``f .. f + _ID_SPAN - 1``, more than a
#: file of at most ``MAX_JOURNAL_SIZE`` bytes can hold (ids are checked by the CRC anyway: this only
#: keeps a false start from reading the long record its bytes would describe).
_ID_SPAN = 1 << 48
#: A compressed file counts at most this many times its bytes on disk (what a unit's raw_len can
#: claim over its record's size is only an estimate of the work of reading it: never trusted far).
MAX_EXPANSION = 64.0


@attrs.frozen
class SegFile:
    """One journal file as seen at planning time."""

    path: str
    ms: int
    header: FileHeader
    size: int


@attrs.frozen
class Segment:
    """Records of one file that start in bytes ``[start, end)`` and have ids in ``[lo, hi)``.

    ``exact`` says ``start`` is a known record boundary; otherwise the reader probes forward.
    """

    path: str
    salt: int
    file_first_id: int
    start: int
    end: int
    lo: int
    hi: int
    exact: bool
    #: Estimated bytes of records a reader decodes here: ``end - start`` (the default), or for
    #: compressed units their inner bytes (:meth:`QueueView.expansion`): what packing weighs.
    work: int = attrs.field(default=attrs.Factory(lambda seg: seg.end - seg.start, takes_self=True))


@attrs.frozen
class Position:
    """Where the record of ``id`` starts (or would start): file index and byte offset."""

    file: int
    offset: int
    id: int


@attrs.define
class Gap:
    """Damage met while reading: ``reason`` at ``offset``; ids ``[lo, hi)`` were not found."""

    path: str
    offset: int
    reason: str
    lo: int
    hi: int


def probe(fd: int, salt: int, pos: int, limit: int, min_id: int) -> Put | None:
    """The first valid PUT or PUTX (id >= ``min_id``) starting at a byte in ``[pos, limit)``."""
    file_size = os.fstat(fd).st_size
    while pos < limit:
        n = min(PROBE, limit - pos) + PUT_OVERHEAD
        buf = os.pread(fd, n, pos)
        stop = min(len(buf), limit - pos)
        # only offsets whose type byte says PUT or PUTX can start a record we use
        found = _ITEM_TYPES.search(buf, RECORD_HEADER_SIZE - 1)
        while found is not None and found.start() - (RECORD_HEADER_SIZE - 1) < stop:
            rec = _candidate(fd, buf, found.start() - (RECORD_HEADER_SIZE - 1), pos, salt, min_id, file_size)
            if rec is not None and rec.id >= min_id:
                return rec
            found = _ITEM_TYPES.search(buf, found.start() + 1)
        pos += stop
    return None


def _candidate(fd: int, buf: bytes, k: int, base: int, salt: int, min_id: int, file_size: int) -> Put | None:
    if k + RECORD_HEADER_SIZE > len(buf) or buf[k + 8] not in _ITEM_TYPE_SET:
        return None
    length = int.from_bytes(buf[k + 4 : k + 8], "little")
    if length < UNIT_FIELDS_SIZE or length > MAX_BODY or base + k + RECORD_HEADER_SIZE + length > file_size:
        return None
    # Every item record's body starts with its (first) id, which lies in the file's range: checked
    # before anything past the window is read (perf: in compressed frames a type byte and a length
    # below MAX_BODY are common, and each such false start cost a read of up to 16 MiB).
    body = k + RECORD_HEADER_SIZE
    if body + 8 <= len(buf) and not 0 <= int.from_bytes(buf[body : body + 8], "little") - min_id < _ID_SPAN:
        return None
    if k + RECORD_HEADER_SIZE + length <= len(buf):
        rec = decode_one(buf, k, base, salt)
    else:  # a record longer than the probe window: read all of it
        full = os.pread(fd, RECORD_HEADER_SIZE + length, base + k)
        if len(full) < RECORD_HEADER_SIZE + length:
            return None
        rec = decode_one(full, 0, base + k, salt)
    if isinstance(rec, Unit):  # a unit starts with its first item (a damaged one is no candidate)
        items = compressed.decode_unit(rec, salt)
        return None if isinstance(items, str) else items[0]
    return rec if isinstance(rec, Put) else None


def iter_records(
    fd: int,
    salt: int,
    pos: int,
    size: int,
    min_id: int,
    gaps: list[Gap] | None = None,
    path: str = "",
    chunk: int = CHUNK,
) -> Iterator[Put]:
    """Valid records from boundary ``pos`` on, walked by log/walker.py in reads of about
    ``chunk`` bytes: damage is skipped (and noted in ``gaps``); damage with nothing valid after
    it ends the iteration (a tail that may still be being written)."""

    def report(span: Span, rest: bytes) -> bool:
        if span.resume is None or span.resume_id is None:
            return False
        if gaps is not None:
            gaps.append(Gap(path, span.offset, span.reason, span.expected, span.resume_id))
        return True

    walker = FileWalker(lambda n, off: os.pread(fd, n, off), salt, pos, size, min_id, report, chunk=chunk)
    for batch in walker:
        yield from batch


class QueueView:
    """A read-only view of one queue directory, refreshed on demand."""

    def __init__(self, directory: str | os.PathLike[str], name: str | None = None) -> None:
        self.directory = os.fspath(directory)
        if not os.path.isdir(self.directory):
            raise FileNotFoundError(f"no queue directory at {self.directory!r}")
        self.name = name or detect_queue_name(self.directory)
        self.files: list[SegFile] = []
        self._expansion: dict[str, float] = {}
        self.refresh()

    def refresh(self) -> None:
        files = []
        for ms, path in list_journal_files(self.directory, self.name):
            try:
                check = inspect_journal(path, self.name, ms)
            except FileNotFoundError:
                continue  # archived while we looked
            if check.header is None:
                continue  # unreadable (the owner sets it aside) or not a journal file at all
            files.append(SegFile(path, ms, check.header, check.size))
        self.files = files
        paths = {f.path for f in files}
        self._expansion = {p: e for p, e in self._expansion.items() if p in paths}

    # ------------------------------------------------------------------ ends
    def first_id(self) -> int:
        """Lowest id still on disk (the next id if there is none)."""
        return self.files[0].header.first_id if self.files else self.tail().id

    def tail(self) -> Position:
        """Just past the newest complete record: its ``id`` is the next id to be written."""
        if not self.files:
            return Position(-1, 0, 1)
        k = len(self.files) - 1
        f = self.files[k]
        window = PROBE
        with _open(f.path) as fd:
            size = os.fstat(fd).st_size
            while True:
                start = max(f.header.size, size - window)
                if start == f.header.size:
                    first = _at(fd, f, start)
                else:
                    first = probe(fd, f.header.salt, start, size, f.header.first_id)
                if first is not None:
                    last = None
                    for last in iter_records(fd, f.header.salt, first.offset, size, first.id):
                        pass
                    assert last is not None
                    return Position(k, last.offset + last.size, last.id + 1)
                if start == f.header.size:
                    return Position(k, f.header.size, f.header.first_id)
                window *= 4

    # ------------------------------------------------------------------ locating
    def locate(self, item_id: int) -> Position:
        """Position of the first record with id >= ``item_id`` (bisection on byte offsets).

        For an id inside a compressed unit (after its first id) that is the unit's own offset
        (``id`` then names ``item_id``'s item, not the unit's first): a read starting there takes
        the unit and filters its ids (:attr:`Segment.lo`).  Where a read of the ids below
        ``item_id`` must END is :meth:`locate_end`."""
        return self._locate(item_id)[0]

    def locate_end(self, item_id: int) -> Position:
        """Where a read of ids below ``item_id`` stops: the first record holding no id below it.

        That is :meth:`locate` unless ``item_id`` falls inside a compressed unit past its first
        id: then the unit holds ids on both sides, and the end is just past it (the reader
        filters its ids by :attr:`Segment.hi`).  Ending at the unit's offset would leave its ids
        below ``item_id`` out of this read while the next read starts at ``item_id``: lost."""
        pos, unit_end = self._locate(item_id)
        if unit_end is None:
            return pos
        return Position(pos.file, unit_end[0], unit_end[1])

    def _locate(self, item_id: int) -> tuple[Position, tuple[int, int] | None]:
        """:meth:`locate`, and when ``item_id`` lies inside a unit past its first id, the
        unit's end offset and the id after its last."""
        if not self.files or item_id <= self.files[0].header.first_id:
            return (self._file_start(0) if self.files else Position(-1, 0, 1)), None
        k = max(i for i, f in enumerate(self.files) if f.header.first_id <= item_id)
        f = self.files[k]
        with _open(f.path) as fd:
            size = f.size if k < len(self.files) - 1 else os.fstat(fd).st_size
            lo, lo_id, hi = f.header.size, f.header.first_id, size
            while hi - lo > PROBE:
                mid = (lo + hi) // 2
                rec = probe(fd, f.header.salt, mid, min(hi, mid + PROBE), f.header.first_id)
                if rec is None or rec.id > item_id:
                    hi = mid
                else:
                    lo, lo_id = rec.offset, rec.id
            # the items of a unit come out one by one, all with the unit's offset and size
            found: Position | None = None
            prev_offset, rec_size, last = -1, 0, 0
            for rec in iter_records(fd, f.header.salt, lo, size, lo_id):
                if found is not None:
                    if rec.offset != found.offset:
                        return found, (found.offset + rec_size, rec.id)
                    last = rec.id
                    continue
                if rec.id >= item_id:
                    pos = Position(k, rec.offset, rec.id)
                    if rec.offset != prev_offset:
                        return pos, None
                    found, rec_size, last = pos, rec.size, rec.id  # inside a unit: walk to its end
                    continue
                prev_offset = rec.offset
            if found is not None:
                return found, (found.offset + rec_size, last + 1)
        if k + 1 < len(self.files):
            nf = self.files[k + 1]
            return Position(k + 1, nf.header.size, nf.header.first_id), None
        return self.tail(), None

    def locate_time(self, when_ms: int) -> int:
        """Id of the first record added at or after ``when_ms`` (the next id if none)."""
        tail = self.tail()
        lo, hi = self.first_id(), tail.id  # answer in [lo, hi]
        while lo < hi:
            mid = (lo + hi) // 2
            rec = self.record_at(mid)
            if rec is None or rec.add_ms >= when_ms:
                hi = mid
            else:
                lo = mid + 1
        return lo

    def record_at(self, item_id: int) -> Put | None:
        """The first record with id >= ``item_id`` (``None`` past the tail)."""
        pos = self.locate(item_id)
        if pos.file < 0:
            return None
        f = self.files[pos.file]
        with _open(f.path) as fd:
            # inside a compressed unit the records at pos.offset start with the unit's first id
            for rec in iter_records(fd, f.header.salt, pos.offset, os.fstat(fd).st_size, f.header.first_id):
                if rec.id >= item_id:
                    return rec
        return None

    def id_after_bytes(self, start: Position, nbytes: int, stop: Position) -> Position:
        """Advance from ``start`` over about ``nbytes`` of records (at least one), not past
        ``stop``: the position of the first record starting after the budget."""
        if (start.file, start.offset) >= (stop.file, stop.offset):
            return start
        k, offset, budget = start.file, start.offset, nbytes
        while k < stop.file:
            f = self.files[k]
            if f.size - offset > budget:
                break
            budget -= f.size - offset
            k, offset = k + 1, self.files[k + 1].header.size
        f = self.files[k]
        limit = stop.offset if k == stop.file else f.size
        target = offset + max(budget, 1)
        if target >= limit:
            return stop if k == stop.file else self._file_start(k + 1)
        with _open(f.path) as fd:
            rec = probe(fd, f.header.salt, target, limit, f.header.first_id)
        if rec is None:
            return stop if k == stop.file else self._file_start(k + 1)
        return Position(k, rec.offset, rec.id)

    def _file_start(self, k: int) -> Position:
        f = self.files[k]
        return Position(k, f.header.size, f.header.first_id)

    # ------------------------------------------------------------------ planning
    def expansion(self, k: int) -> float:
        """About how many bytes of records file ``k`` holds per byte on disk: for a file that
        starts with a compressed unit, that unit's ``raw_len`` over its record's size (at most
        :data:`MAX_EXPANSION`), else 1.  One small read per file, kept (a file's first record never
        changes); an estimate for spreading work, never trusted for reading."""
        f = self.files[k]
        path = f.path
        e = self._expansion.get(path)
        if e is None:
            with _open(path) as fd:
                head = os.pread(fd, RECORD_HEADER_SIZE + UNIT_FIELDS_SIZE, f.header.size)
            e = 1.0
            if (
                len(head) == RECORD_HEADER_SIZE + UNIT_FIELDS_SIZE
                and head[RECORD_HEADER_SIZE - 1] == TYPE_PUTZ
            ):
                length = int.from_bytes(head[4:8], "little")
                raw_len = int.from_bytes(head[RECORD_HEADER_SIZE + 13 :], "little")
                e = min(MAX_EXPANSION, max(1.0, raw_len / (RECORD_HEADER_SIZE + length)))
            if k < len(self.files) - 1 or e > 1.0:  # the newest file may not have its first record yet
                self._expansion[path] = e
        return e

    def plan(self, lo: Position, hi: Position, split_bytes: int) -> list[Segment]:
        """Segments covering ids ``[lo.id, hi.id)``, each about ``split_bytes`` of records long at
        most: bytes on disk, or for a compressed file the estimated inner bytes (:meth:`expansion`),
        cut into equal pieces."""
        out: list[Segment] = []
        if lo.id >= hi.id or lo.file < 0:
            return out
        for k in range(lo.file, hi.file + 1):
            f = self.files[k]
            start = lo.offset if k == lo.file else f.header.size
            end = hi.offset if k == hi.file else f.size
            e = self.expansion(k)
            step = split_bytes
            if e > 1.0 and end > start:  # a compressed file: pieces of equal work
                pieces = -(-int((end - start) * e) // split_bytes)
                step = max(1, -(-(end - start) // pieces))
            pos, exact = start, True
            while pos < end:
                nxt = min(end, pos + step)
                out.append(
                    Segment(
                        f.path,
                        f.header.salt,
                        f.header.first_id,
                        pos,
                        nxt,
                        lo.id,
                        hi.id,
                        exact,
                        int((nxt - pos) * e),
                    )  # fmt: skip
                )
                pos, exact = nxt, False
        return out


def open_segment(seg: Segment, gaps: list[Gap] | None) -> tuple[int, int, int] | None:
    """(descriptor, file size, offset of the first record) for reading ``seg``, the caller to
    close the descriptor; None when its file was archived (noted in ``gaps``) or the segment
    holds no record start."""
    try:
        fd = os.open(seg.path, os.O_RDONLY)
    except FileNotFoundError:
        if gaps is not None:
            gaps.append(Gap(seg.path, seg.start, "journal file archived before it was read", seg.lo, seg.hi))
        return None
    try:
        size = os.fstat(fd).st_size
        pos = seg.start
        if not seg.exact:
            first = probe(fd, seg.salt, seg.start, min(seg.end, size), seg.file_first_id)
            if first is None:
                os.close(fd)
                return None
            pos = first.offset
    except BaseException:
        os.close(fd)
        raise
    return fd, size, pos


def read_segment(
    seg: Segment, gaps: list[Gap] | None = None, expected: int | None = None, chunk: int = CHUNK
) -> Iterator[Put]:
    """The records of ``seg`` in id order (damage skipped and noted in ``gaps``); ``expected``
    is the id of the record at ``seg.start`` when known (it dates a gap found right there).
    ``chunk`` is the read size (any size reads the same records)."""
    opened = open_segment(seg, gaps)
    if opened is None:
        return
    fd, size, pos = opened
    try:
        min_id = expected if expected is not None and seg.exact else seg.file_first_id
        for rec in iter_records(fd, seg.salt, pos, size, min_id, gaps, seg.path, chunk):
            if rec.offset >= seg.end or rec.id >= seg.hi:
                return
            if rec.id >= seg.lo:
                yield rec
    finally:
        os.close(fd)


def _at(fd: int, f: SegFile, offset: int) -> Put | None:
    for rec in iter_records(fd, f.header.salt, offset, os.fstat(fd).st_size, f.header.first_id):
        return rec
    return None


class _open:
    """``with _open(path) as fd``: a read-only descriptor, closed on exit."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_RDONLY)

    def __enter__(self) -> int:
        return self.fd

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
