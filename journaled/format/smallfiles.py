"""The small files' formats, as pure functions on bytes: reader checkpoints, and the CRC'd text
files (reader registry, external bookmarks, durable settings).  docs/format.md describes them byte by byte."""

from __future__ import annotations

import json
import struct
from typing import Any

import attrs
from crc32c import crc32c

from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.format.record import CHECKPOINT_MAGIC, FORMAT_VERSION

# ---------------------------------------------------------------------------------------------
# Checkpoints
# ---------------------------------------------------------------------------------------------

# magic(8) version(u16) flags(u16) head(u64) file_ms(u64) file_offset(u64) n_done(u32) n_err(u32)
_CKP_FIXED = struct.Struct("<8sHHQQQII")
#: the version writers write: version 2 adds the counters block (version 1 is still read)
CHECKPOINT_VERSION = 2


@attrs.frozen
class ReaderCounts:
    """A reader's counters, kept in its checkpoint so they outlive the process that owns the queue.

    ``put_origin`` is not a count: the reader's ``put`` is ``next_id - put_origin`` (the items put
    since it was created), so it is exact whatever was checkpointed; ``None`` (a version-1
    checkpoint, or none) means "from the next id at open".  The rest count events and are exactly
    what the checkpoint's head and ``done`` reflect, except ``delivered`` (docs/format.md [F-37]).
    """

    put_origin: int | None = None
    delivered: int = 0
    committed: int = 0
    aborted: int = 0
    timed_out: int = 0
    expired: int = 0
    discarded: int = 0
    dead_lettered: int = 0
    rejected: int = 0


#: the counters block's fields, in their order on disk
COUNT_FIELDS = tuple(a.name for a in attrs.fields(ReaderCounts))


@attrs.frozen
class CheckpointData:
    """A reader's durable state: everything below ``head`` is committed, plus ``done`` beyond it.

    ``file_ms``/``file_offset`` locate the record of ``head`` in the journal (a hint: it is
    verified and ignored if wrong).  ``errors`` maps ids to their abort counts.  ``counts`` are
    the reader's counters (:class:`ReaderCounts`).
    """

    head: int
    file_ms: int = 0
    file_offset: int = 0
    done: tuple[int, ...] = ()
    errors: tuple[tuple[int, int], ...] = ()
    counts: ReaderCounts = ReaderCounts()


def encode_checkpoint(ck: CheckpointData) -> bytes:
    """Encode a checkpoint file (fixed part, done ids, error counts, counters, CRC32C of all of it)."""
    parts = [
        _CKP_FIXED.pack(
            CHECKPOINT_MAGIC,
            CHECKPOINT_VERSION,
            0,
            ck.head,
            ck.file_ms,
            ck.file_offset,
            len(ck.done),
            len(ck.errors),
        ),
        struct.pack(f"<{len(ck.done)}Q", *ck.done),
    ]
    parts.extend(struct.pack("<QI", i, c) for i, c in ck.errors)
    values: list[int] = []
    if ck.counts != ReaderCounts():  # else an empty block: nothing counted yet, origin unknown
        origin = ck.counts.put_origin
        # an unknown origin with counts is written as the head: nothing before it was counted
        values = [ck.head if origin is None else origin]
        values += [getattr(ck.counts, name) for name in COUNT_FIELDS[1:]]
    parts.append(struct.pack(f"<I{len(values)}Q", len(values), *values))
    body = b"".join(parts)
    return body + struct.pack("<I", crc32c(body))


def decode_checkpoint(buf: bytes, path: str = "<checkpoint>") -> CheckpointData:
    """Decode a checkpoint (version 1 or 2), raising :class:`CorruptJournal` on any inconsistency."""
    if len(buf) < _CKP_FIXED.size + 4:
        raise CorruptJournal(path, len(buf), "checkpoint truncated")
    magic, version, _flags, head, file_ms, file_offset, n_done, n_err = _CKP_FIXED.unpack_from(buf)
    if magic != CHECKPOINT_MAGIC:
        raise CorruptJournal(path, 0, "bad checkpoint magic")
    if version not in (FORMAT_VERSION, CHECKPOINT_VERSION):
        raise UnsupportedVersion(path, 8, f"checkpoint version {version} is not supported")
    pos = _CKP_FIXED.size + 8 * n_done + 12 * n_err
    n_counts = 0
    if version == CHECKPOINT_VERSION and len(buf) >= pos + 8:
        (n_counts,) = struct.unpack_from("<I", buf, pos)
    expected = pos + 4 + (4 + 8 * n_counts if version == CHECKPOINT_VERSION else 0)
    if len(buf) != expected:
        raise CorruptJournal(path, min(len(buf), expected), "checkpoint length mismatch")
    (crc,) = struct.unpack_from("<I", buf, len(buf) - 4)
    if crc32c(buf[:-4]) != crc:
        raise CorruptJournal(path, len(buf) - 4, "checkpoint CRC mismatch")
    done = struct.unpack_from(f"<{n_done}Q", buf, _CKP_FIXED.size)
    errors = tuple(
        struct.unpack_from("<QI", buf, _CKP_FIXED.size + 8 * n_done + 12 * k) for k in range(n_err)
    )
    counts = ReaderCounts()
    if version == CHECKPOINT_VERSION:
        # counters this version does not know are ignored; ones it knows but the file lacks are 0
        values = struct.unpack_from(f"<{n_counts}Q", buf, pos + 4)
        counts = ReaderCounts(**dict(zip(COUNT_FIELDS, values, strict=False)))
    return CheckpointData(head, file_ms, file_offset, tuple(done), tuple(errors), counts)


# ---------------------------------------------------------------------------------------------
# Small text files (reader registry, external bookmarks)
# ---------------------------------------------------------------------------------------------


def encode_crc_text(magic: str, lines: list[str]) -> bytes:
    """A small ASCII file: ``magic`` line, one line per entry, then ``crc32c <hex>`` of all
    the bytes before it (see docs/format.md)."""
    body = "\n".join([magic, *lines]).encode("ascii") + b"\n"
    return body + b"crc32c %08x\n" % crc32c(body)


def decode_crc_text(raw: bytes, magic: str) -> list[str] | None:
    """The entry lines of a file made by :func:`encode_crc_text`, or ``None`` when its magic or
    CRC does not match (never raises on bad bytes)."""
    body, sep, tail = raw.rpartition(b"crc32c ")
    try:
        if not sep or int(tail.strip(), 16) != crc32c(body):
            return None
        lines = body.decode("ascii").splitlines()
    except (ValueError, UnicodeDecodeError):
        return None
    if not lines or lines[0] != magic:
        return None
    return lines[1:]


# ---------------------------------------------------------------------------------------------
# Durable settings (`<queue>.settings`)
# ---------------------------------------------------------------------------------------------

SETTINGS_MAGIC = "journaled-settings 1"


@attrs.frozen
class SettingsData:
    """The decoded lines of a settings file: ``readers`` maps a reader name to its settings (a
    JSON object, see ``journaled.config.reader_settings``); ``queue`` is the queue-level line's
    object (retention; empty: no line); ``other`` keeps, verbatim and in order, the lines of
    kinds this version does not know, so a rewrite never drops them."""

    readers: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    other: tuple[str, ...] = ()
    queue: dict[str, Any] = attrs.field(factory=dict)  # last: positional (readers, other) still works


def _json_line(value: object) -> str:
    # ASCII (non-ASCII and lone surrogates of undecodable paths escaped), one line, canonical
    return json.dumps(value, ensure_ascii=True, allow_nan=False, sort_keys=True, separators=(",", ":"))


def encode_settings(data: SettingsData) -> bytes:
    """The canonical bytes of a settings file: readers sorted by name, the queue line (if any),
    then the other lines."""
    lines = [f"reader {name} {_json_line(data.readers[name])}" for name in sorted(data.readers)]
    if data.queue:
        lines.append(f"queue {_json_line(data.queue)}")
    return encode_crc_text(SETTINGS_MAGIC, [*lines, *data.other])


def decode_settings(raw: bytes, path: str = "<settings>") -> SettingsData:
    """Decode a settings file, raising :class:`CorruptJournal` when its magic or CRC does not
    match (then nothing of it is trusted).  A ``reader`` line whose JSON is not an object is
    damage too: the CRC matched, so something that is not us wrote it; so is a second ``queue``
    line or one whose JSON is not an object."""
    entries = decode_crc_text(raw, SETTINGS_MAGIC)
    if entries is None:
        raise CorruptJournal(path, 0, "settings file: bad magic or CRC mismatch")
    readers: dict[str, dict[str, Any]] = {}
    queue: dict[str, Any] | None = None
    other: list[str] = []
    for line in entries:
        kind, _, rest = line.partition(" ")
        if kind == "queue":
            try:
                found = json.loads(rest)
            except ValueError:
                found = None
            if not isinstance(found, dict) or queue is not None:
                raise CorruptJournal(path, 0, f"settings file: bad queue line {line[:80]!r}")
            queue = found
            continue
        if kind != "reader":
            other.append(line)
            continue
        name, _, text = rest.partition(" ")
        try:
            value = json.loads(text)
        except ValueError:
            value = None
        if not name or not isinstance(value, dict) or name in readers:
            raise CorruptJournal(path, 0, f"settings file: bad reader line {line[:80]!r}")
        readers[name] = value
    return SettingsData(readers, tuple(other), queue or {})
