"""THE record walker: every reader of journal bytes goes through :class:`FileWalker`.

Like LevelDB's ``log::Reader`` with its ``Reporter``, one class answers, for everyone (the
queue's read path and read-behind, recovery at open, ``journaled check``/``repair``, the
read-only scanner used by the CLI and tailing processes, and the Spark segment reader), the two
questions that matter: *what is a valid record* and *where does the next one start after
damage*.  The answers:

* A record is valid when it decodes (format/record.py) and its position-seeded CRC32C matches; only
  then is it returned.  A valid PUT whose id is below the id expected next is skipped (it cannot
  belong to this stretch of the file); a valid PUT whose id is above it is accepted (the ids in
  between were lost to damage, which the caller sees as a jump).
* A compressed unit (a PUTZ, docs/format.md section 4.5) is decompressed here and its items
  returned as if they stood where the unit stands (their ``offset`` is the unit's).  A walk that
  stops between two of a unit's items keeps ``pos`` at the unit and ``expected`` at the next id:
  the next walk decodes the unit again (a few recent units are kept decoded) and skips the ids
  below.  A unit whose CRC is right but whose content is not is damage like any other: its items
  are lost, and only they.  Without a zstd binding a unit stops the walk as a type that must be
  understood does (:class:`~journaled.errors.CompressionUnavailable`).
* A valid record of a type that must be understood and is not (a newer writer's, [F-11]) stops
  the walk: the records before it are returned, then :class:`UnsupportedVersion` is raised at it
  (its ``offset`` is the record's), every time the walk is asked to go on.
* Damage (bad bytes, or bytes that end inside a record) is described once, as a :class:`Span`,
  and handed to the caller's ``report`` callback together with the bytes from there to the end
  of the walk.  The span says where the next valid PUT (with an id at or above the expected one)
  starts, found by :func:`record.find_next_record`, or that none does.  The callback decides:
  return ``True`` to skip past the damage (to that next record, or to the end when there is
  none), ``False`` to stop the walk at the damage.

Reading goes through a ``pread(size, offset)`` callable, so the walker serves file descriptors,
whole files already in memory (recovery) and anything else alike.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable

import attrs

from journaled.errors import UnsupportedVersion
from journaled.format import compressed
from journaled.format.record import (
    MAX_BODY,
    RECORD_HEADER_SIZE,
    RECORD_TYPE_AT,
    TYPE_PUTZ,
    Damage,
    Put,
    Unit,
    decode_one,
    find_next_record,
)
from journaled.format.speedups import decode_many, walk_puts

#: Bytes read per chunk (at most; a small budget reads a small window).
READ_CHUNK = 1024 * 1024

Pread = Callable[[int, int], bytes]


@attrs.frozen
class Span:
    """Damaged bytes from ``offset``: the next valid record starts at ``resume`` (with id
    ``resume_id``), or nothing after ``offset`` validates (``resume is None``)."""

    offset: int
    expected: int  # the id the record at ``offset`` should have had
    resume: int | None
    resume_id: int | None
    reason: str
    incomplete: bool  # the bytes simply end inside a record (an append cut short)
    torn: bool  # nothing validates after it and it is incomplete or all zeros: an interrupted append

    def length(self, limit: int) -> int:
        """Bytes the span covers when the walk ends at ``limit``."""
        return (self.resume if self.resume is not None else limit) - self.offset

    def lost_ids(self) -> tuple[int, int] | None:
        """Ids the span swallowed, known when a valid record follows it (inclusive range)."""
        if self.resume_id is not None and self.resume_id > self.expected:
            return (self.expected, self.resume_id - 1)
        return None


#: ``report(span, rest) -> skip?``: ``rest`` holds the bytes from ``span.offset`` to the walk's end.
Reporter = Callable[[Span, bytes], bool]


def skip_all(span: Span, rest: bytes) -> bool:
    """A reporter that skips every damaged span without recording it."""
    return True


class FileWalker:
    """Walk the records of one journal file from ``pos`` (a record boundary) to ``limit``.

    ``pos`` is always just past what has been returned (or at a resync point); ``expected`` is
    the id the next record should have; ``done`` is set at ``limit`` or when the walk stopped at
    damage (``pos`` then stays at the damage).
    """

    def __init__(
        self,
        pread: Pread,
        salt: int,
        pos: int,
        limit: int,
        expected: int,
        report: Reporter = skip_all,
        chunk: int = READ_CHUNK,
        trusted: list[tuple[Unit, int]] | None = None,
    ) -> None:
        self.pread = pread
        self.salt = salt
        self.pos = pos
        self.limit = limit
        self.expected = expected
        self.report = report
        self.chunk = chunk
        #: when a list: units are taken on their CRC alone, not inflated (recovery at open, which
        #: needs their ids; [F-16]): each is appended with the first id it holds at or above
        #: ``expected``, and none of its items is returned
        self.trusted = trusted
        self.done = pos >= limit

    def read_batch(
        self, max_bytes: int = READ_CHUNK, max_items: int = 1 << 30, at_least_one: bool = True
    ) -> list[Put]:
        """The next valid records: at most ``max_items``, and at most ``max_bytes`` of payload
        (but at least one record when any is left, unless ``at_least_one`` is false).  Empty
        when the walk is ``done``, or when the next record does not fit the budget."""
        out: list[Put] = []
        nbytes = 0
        salt = self.salt
        data, base, reuse = b"", self.pos, False  # data: the bytes read, from file offset base
        while not self.done and len(out) < max_items and nbytes < max_bytes:
            if self.pos >= self.limit:
                self.done = True
                break
            if reuse and self.pos - base < len(data):
                # perf: after a unit, the walk goes on in the bytes already read (re-reading the
                # rest of a whole-file window after each unit would copy the file once per unit)
                rel = self.pos - base
            else:
                # perf: a small budget reads (and CRC-checks) a small window, not a whole chunk
                want = min(self.limit - self.pos, min(self.chunk, max_bytes - nbytes) + 4096)
                data, base, rel = self.pread(want, self.pos), self.pos, 0
            reuse = False
            try:
                # never past max_bytes (but at least one record): `full` says the next did not fit
                recs, pos, self.expected, nbytes, full, end, damage = walk_puts(
                    data, base, salt, rel, self.expected, max_items - len(out), max_bytes, nbytes,
                    at_least_one and not out,
                )  # fmt: skip
            except UnsupportedVersion as exc:
                # A valid record this version must not skip ([F-11]): the records before it are
                # delivered, and the walk stops at it (pos stays there; the next call raises).
                if exc.offset <= self.pos:
                    if out:
                        break
                    raise
                data = data[: exc.offset - base]
                recs, pos, self.expected, nbytes, full, end, damage = walk_puts(
                    data, base, salt, rel, self.expected, max_items - len(out), max_bytes, nbytes,
                    at_least_one and not out,
                )  # fmt: skip
            out += recs
            self.pos = base + pos
            if full:
                break
            if (
                damage is None
                and pos + RECORD_TYPE_AT < len(data)
                and data[pos + RECORD_TYPE_AT] == TYPE_PUTZ
            ):
                # walk_puts stops at a compressed unit (or ran out of max_items just before one)
                if len(out) >= max_items:
                    break
                got = decode_one(data, pos, base, salt)
                if isinstance(got, Unit):
                    try:
                        nbytes, stop = self._take_unit(got, out, nbytes, max_items, max_bytes, at_least_one)
                    except UnsupportedVersion:
                        if out:
                            break  # deliver what came before it first
                        raise
                    if stop:
                        break
                    reuse = True
                    continue
                if isinstance(got, Damage) and not got.incomplete:
                    self._damaged(got)
                    continue
                # a unit longer than the window: read as one big record below
                damage, end = Damage(self.pos, "truncated record", True), rel
            if not data and self.pos < self.limit:
                damage = Damage(self.pos, "file shorter than expected", True)
            if damage is None or (damage.incomplete and end > rel):
                continue  # a window boundary (or max_items): the next read starts at pos
            if damage.incomplete and base + len(data) < self.limit:
                try:
                    big = self._one_big_record()
                except UnsupportedVersion:
                    if out:
                        break  # deliver what came before it first
                    raise
                if isinstance(big, Unit):
                    try:
                        nbytes, stop = self._take_unit(big, out, nbytes, max_items, max_bytes, at_least_one)
                    except UnsupportedVersion:
                        if out:
                            break
                        raise
                    if stop:
                        break
                    continue
                if big is not None:
                    if big.id >= self.expected:
                        out.append(big)
                        nbytes += len(big.payload)
                        self.expected = big.id + 1
                    continue
            self._damaged(damage)
        return out

    def _one_big_record(self) -> Put | Unit | None:
        """The record at ``pos`` when it is longer than a read window (read exactly it).  A
        compressed unit is returned with ``pos`` still at it (:meth:`_take_unit` moves on)."""
        hdr = self.pread(RECORD_HEADER_SIZE, self.pos)
        length = int.from_bytes(hdr[4:8], "little")
        if length > MAX_BODY:
            return None
        data = self.pread(min(RECORD_HEADER_SIZE + length, self.limit - self.pos), self.pos)
        recs, end, _ = decode_many(data, self.pos, self.salt, 0, MAX_BODY, limit=1)
        if not recs:
            return None
        rec = recs[0]
        if isinstance(rec, Unit):
            return rec
        self.pos += end
        return rec if isinstance(rec, Put) else None

    def _take_unit(
        self, unit: Unit, out: list[Put], nbytes: int, max_items: int, max_bytes: int, at_least_one: bool
    ) -> tuple[int, bool]:
        """Append the items of ``unit`` (at ``pos``) with ids at or above ``expected`` to ``out``
        within the budget; return the payload bytes taken and whether the budget stopped the walk
        inside the unit (``pos`` then stays at the unit, ``expected`` at the next id).  A damaged
        unit is handed to the reporter like any damage."""
        if self.trusted is not None and compressed.zstd is not None:
            # (without the binding the unit is inflated below, which raises as a reader must)
            if unit.last_id >= self.expected:
                self.trusted.append((unit, max(unit.first_id, self.expected)))
                self.expected = unit.last_id + 1
            self.pos = unit.offset + unit.size
            return nbytes, False
        got = _decoded(unit, self.salt)
        if isinstance(got, str):
            self._damaged(Damage(unit.offset, got, False))
            return nbytes, False
        items, sizes = got  # sizes[i]: payload bytes of items[:i]
        k = max(0, self.expected - unit.first_id)  # ids run first_id.. without a gap ([F-45])
        n = len(items)
        room = max_items - len(out)
        stop = n - k > room
        last = min(n, k + room)
        if nbytes + sizes[last] - sizes[k] > max_bytes:
            # the most items from k whose payloads fit (at least one when the walk has none yet)
            j = max(k, bisect_right(sizes, max_bytes - nbytes + sizes[k], k, last + 1) - 1)
            if j == k and at_least_one and not out and k < last:
                j = k + 1
            stop, last = stop or j < last, j
        nbytes += sizes[last] - sizes[k]
        if last > k:
            out += items[k:last]
            self.expected = unit.first_id + last
        if last >= n:
            self.pos = unit.offset + unit.size
            return nbytes, stop
        return nbytes, True

    def _damaged(self, damage: Damage) -> None:
        rest = self.pread(self.limit - self.pos, self.pos)
        nxt = find_next_record(rest, 1, self.pos, self.salt, self.expected, MAX_BODY)
        resume = resume_id = None
        if nxt is not None:
            rec = decode_many(rest, self.pos, self.salt, nxt, MAX_BODY, limit=1)[0][0]
            assert isinstance(rec, (Put, Unit))
            resume = self.pos + nxt
            resume_id = rec.id if isinstance(rec, Put) else max(rec.first_id, self.expected)
        torn = nxt is None and (damage.incomplete or not any(rest))
        span = Span(self.pos, self.expected, resume, resume_id, damage.reason, damage.incomplete, torn)
        if not self.report(span, rest):
            self.done = True  # stopped at the damage: pos stays there
        elif resume is None:
            self.pos, self.done = self.limit, True
        else:
            self.pos = resume

    def __iter__(self) -> FileWalker:
        return self

    def __next__(self) -> list[Put]:
        batch = self.read_batch()
        if not batch:
            raise StopIteration
        return batch


#: The last units decoded, by (file salt, offset, size, first id, count): a reader stopped inside a
#: unit decodes it again on its next read; the last two are kept decoded (their records are
#: immutable: one for the unit a read stopped in, one for a second reader's), with their frame (a
#: hit must hold the same bytes: a file rewritten in place, or another file with the same salt,
#: holds another unit there) and the running sums of their payload sizes.  perf: keyed by numbers,
#: not by the frame, so a lookup does not hash ~50 KB; and two, not eight: a kept unit holds its
#: items' payloads, ~300 KB, which are freed when it leaves, and freeing them eight units later, out
#: of the CPU's caches, made a read-back ~8% slower (readers reading the same backlog in step each
#: decode it then, as each decodes plain records).
_UNITS: dict[tuple[int, int, int, int, int], tuple[bytes, tuple[list[Put], list[int]] | str]] = {}
_UNITS_KEPT = 2
_units_lock = threading.Lock()


def _decoded(unit: Unit, salt: int) -> tuple[list[Put], list[int]] | str:
    """:func:`compressed.unit_contents` (the records and the running payload sizes, ``sizes[i]``:
    bytes of the first ``i`` items), through the cache of recent units."""
    key = (salt, unit.offset, unit.size, unit.first_id, unit.count)
    with _units_lock:
        hit = _UNITS.get(key)
    if hit is not None and hit[0] == unit.frame:
        return hit[1]
    got = compressed.unit_contents(unit, salt)
    with _units_lock:
        if key not in _UNITS and len(_UNITS) >= _UNITS_KEPT:
            del _UNITS[next(iter(_UNITS))]
        _UNITS[key] = (unit.frame, got)
    return got
