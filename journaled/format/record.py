"""The on-disk format, as pure functions on bytes (sans-IO).

Nothing here opens a file: the journal and the checkpoint modules hand bytes in and get values
(or a precise description of the damage) back, which keeps this module trivially fuzzable.
docs/format.md is the normative description; this module is its executable twin.

Why every CRC is *seeded with the record's position*: a record's CRC32C starts from an initial
value derived from the file's random salt and the record's byte offset in that file.  The same
bytes copied anywhere else (inside a payload, into stale garbage, or into another journal file)
therefore fail the check, so a forward scan after damage cannot be fooled into accepting them.
"""

from __future__ import annotations

import re
import struct
from typing import Final

import attrs
from crc32c import crc32c

from journaled.errors import CorruptJournal, UnsupportedVersion
from journaled.format import metadata
from journaled.format.metadata import Meta

# ---------------------------------------------------------------------------------------------
# Journal file header
# ---------------------------------------------------------------------------------------------

JOURNAL_MAGIC: Final = b"\x89JRNL\r\n\x1a"
CHECKPOINT_MAGIC: Final = b"\x89JCKP\r\n\x1a"
FORMAT_VERSION: Final = 1

# magic(8) version(u16) header_len(u16) salt(u32) first_id(u64) created_ms(u64) name_len(u16)
_HEADER_FIXED = struct.Struct("<8sHHIQQH")
HEADER_FIXED_SIZE: Final = _HEADER_FIXED.size  # 34
MAX_NAME_BYTES: Final = 128


@attrs.frozen
class FileHeader:
    """The header that opens every journal file."""

    salt: int
    first_id: int
    created_ms: int
    name: str

    @property
    def size(self) -> int:
        """Bytes the encoded header occupies (records start at this offset)."""
        return header_size(self.name)


def header_size(name: str) -> int:
    """Bytes the header of a journal file of queue ``name`` occupies: 38 + the name's length."""
    return HEADER_FIXED_SIZE + len(name.encode("ascii")) + 4


def encode_header(header: FileHeader) -> bytes:
    """Encode a journal file header (fixed part, queue name, CRC32C of both)."""
    name = header.name.encode("ascii")
    if len(name) > MAX_NAME_BYTES:
        raise ValueError("queue name too long for the header")
    size = header_size(header.name)
    body = (
        _HEADER_FIXED.pack(
            JOURNAL_MAGIC,
            FORMAT_VERSION,
            size,
            header.salt,
            header.first_id,
            header.created_ms,
            len(name),
        )
        + name
    )
    return body + struct.pack("<I", crc32c(body))


def decode_header(buf: bytes | memoryview, path: str = "<journal>") -> FileHeader:
    """Decode a journal file header, or raise :class:`CorruptJournal`/:class:`UnsupportedVersion`.

    The version is checked before anything else after the magic, so that a file written by a
    future format is refused by name rather than reported as damage.
    """
    buf = bytes(buf[: HEADER_FIXED_SIZE + MAX_NAME_BYTES + 4])
    if len(buf) < 10:
        raise CorruptJournal(path, 0, "file too short for a header")
    if buf[:8] != JOURNAL_MAGIC:
        raise CorruptJournal(path, 0, "bad magic number (not a journaled journal file)")
    (version,) = struct.unpack_from("<H", buf, 8)
    if version != FORMAT_VERSION:
        raise UnsupportedVersion(path, 8, f"format version {version} is not supported")
    if len(buf) < HEADER_FIXED_SIZE:
        raise CorruptJournal(path, 0, "file too short for a header")
    _, _, size, salt, first_id, created_ms, name_len = _HEADER_FIXED.unpack_from(buf, 0)
    if name_len > MAX_NAME_BYTES or size != HEADER_FIXED_SIZE + name_len + 4:
        raise CorruptJournal(path, 10, "inconsistent header length")
    if len(buf) < size:
        raise CorruptJournal(path, 0, "file too short for its header")
    (crc,) = struct.unpack_from("<I", buf, size - 4)
    if crc32c(buf[: size - 4]) != crc:
        raise CorruptJournal(path, size - 4, "header CRC mismatch")
    try:
        name = buf[HEADER_FIXED_SIZE : HEADER_FIXED_SIZE + name_len].decode("ascii")
    except UnicodeDecodeError:
        raise CorruptJournal(path, HEADER_FIXED_SIZE, "queue name is not ASCII") from None
    return FileHeader(salt=salt, first_id=first_id, created_ms=created_ms, name=name)


def near_magic(buf: bytes) -> bool:
    """``buf`` opens with the journal magic or one with at most 8 of its 64 bits flipped (other
    bytes come that close with odds below 2**-31): damaged, not foreign."""
    flipped = int.from_bytes(buf[:8].ljust(8, b"\0"), "little") ^ int.from_bytes(JOURNAL_MAGIC, "little")
    return len(buf) >= 8 and bin(flipped).count("1") <= 8


def salvage_header(buf: bytes, name: str, created_ms: int) -> FileHeader | None:
    """Rebuild the damaged header of a journal file of queue ``name`` from its records (``buf``:
    its first bytes; records start at ``header_size(name)``).  The salt is the header's when a
    record validates with it (only right after the header unless :func:`near_magic`: for bytes
    we did not write, a 2**-32 accident); else it is solved from the first record's CRC (an
    invertible function of the seed), accepted only when the next record validates too (so the
    first was intact).  The first id is the first valid record's.  ``None`` when nothing
    validates, or for an intact header of another format version."""
    size = header_size(name)
    if len(buf) < HEADER_FIXED_SIZE:
        return None
    anchored = not near_magic(buf)
    _, version, hlen, salt, _, _, name_len = _HEADER_FIXED.unpack_from(buf, 0)
    if version != FORMAT_VERSION and hlen == HEADER_FIXED_SIZE + name_len + 4 <= len(buf):
        if crc32c(buf[: hlen - 4]) == CRC_STRUCT.unpack_from(buf, hlen - 4)[0]:
            return None  # an intact header of another format version: never guessed at
    pos = find_next_record(buf, size, 0, salt, 0)
    if pos is None or (anchored and pos != size):
        solved = _solve_salt(buf, size)
        if solved is None:
            return None
        first = decode_one(buf, size, 0, solved)
        assert isinstance(first, Put)
        try:
            after = decode_one(buf, size + first.size, 0, solved)
        except UnsupportedVersion:
            return None
        if not (isinstance(after, Put) and after.id == first.id + 1):
            return None  # one record alone cannot tell a wrong salt from a damaged record
        salt, pos = solved, size
    rec = decode_one(buf, pos, 0, salt)
    assert isinstance(rec, (Put, Unit))
    first_id = rec.id if isinstance(rec, Put) else rec.first_id
    return FileHeader(salt=salt, first_id=first_id, created_ms=created_ms, name=name)


def _solve_salt(buf: bytes, offset: int) -> int | None:
    """The salt under which the PUT at ``offset`` validates (None: no whole PUT there)."""
    if offset + PUT_OVERHEAD > len(buf):
        return None
    crc, length, rtype = RECORD_HEADER_STRUCT.unpack_from(buf, offset)
    data = buf[offset + 4 : offset + RECORD_HEADER_SIZE + length]
    if rtype not in (TYPE_PUT, TYPE_PUTX) or length < PUT_FIELDS_SIZE or len(data) < length + 5:
        return None
    # crc32c(data, seed) == crc32c(data, 0) ^ L(seed) with L linear over GF(2) and invertible:
    # solve L(seed) == target by Gaussian elimination on the images of the 32 unit seeds.
    target = crc ^ crc32c(data, 0)
    zeros = bytes(len(data))
    rows = [(crc32c(zeros, 1 << i) ^ crc32c(zeros, 0), 1 << i) for i in range(32)]
    seed = 0
    for bit in range(31, -1, -1):
        pivot = next(r for r in rows if r[0] >> bit & 1)  # there is one: L is invertible
        rows.remove(pivot)
        rows = [(v ^ pivot[0], s ^ pivot[1]) if v >> bit & 1 else (v, s) for v, s in rows]
        if target >> bit & 1:
            target ^= pivot[0]
            seed ^= pivot[1]
    return (seed ^ offset) & 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------

# crc(u32) length(u32) type(u8): ``length`` counts the body only.
RECORD_HEADER_STRUCT = struct.Struct("<IIB")
RECORD_HEADER_SIZE: Final = RECORD_HEADER_STRUCT.size  # 9
# PUT body: id(u64) add_ms(u64) expire_ms(u64, 0 = never) payload
PUT_HEADER_STRUCT = struct.Struct("<IIBQQQ")  # a whole PUT header: record header + the fields
PUT_FIELDS_STRUCT = struct.Struct("<QQQ")
PUT_TAIL_STRUCT = struct.Struct("<IBQQQ")  # a PUT header without its leading CRC (what the CRC covers)
CRC_STRUCT = struct.Struct("<I")
_RECORD_TAIL = struct.Struct("<IB")  # a record header without its leading CRC: length, type
#: Bytes a PUT adds around its payload (``PUT_HEADER_STRUCT.size``, checked just below).  A literal, so
#: that the modules mypyc compiles use it as a constant instead of looking it up per append.
PUT_OVERHEAD: Final = 33
assert PUT_OVERHEAD == PUT_HEADER_STRUCT.size
#: A PUT's fixed fields (id, add_ms, expire_ms): the least body a PUT has.
PUT_FIELDS_SIZE: Final = PUT_FIELDS_STRUCT.size  # 24

# Where each field lies from the record's start.  The compiled twin (_speedups.c) names the same
# offsets; journaled.format.speedups hands it these values and it refuses to run if any differs.
RECORD_CRC_AT: Final = 0  # u32: CRC32C of the record from RECORD_LENGTH_AT on, seeded by position
RECORD_LENGTH_AT: Final = 4  # u32: bytes of the body (what follows the record header)
RECORD_TYPE_AT: Final = 8  # u8
PUT_ID_AT: Final = RECORD_HEADER_SIZE  # 9, u64
PUT_ADD_MS_AT: Final = PUT_ID_AT + 8  # 17, u64
PUT_EXPIRE_MS_AT: Final = PUT_ADD_MS_AT + 8  # 25, u64 (0 = never); the payload follows
if (RECORD_TYPE_AT + 1, PUT_EXPIRE_MS_AT + 8) != (RECORD_HEADER_SIZE, PUT_OVERHEAD):  # pragma: no cover
    raise TypeError("journaled.format.record: the named offsets disagree with the record structs")

TYPE_PUT: Final = 1
#: A PUT with metadata (not-before, producer tag, key, headers): section 4.4 of docs/format.md.
#: Below 0x80: a reader that does not know it must refuse it, since it could not honour it.
TYPE_PUTX: Final = 2
#: A PUTX's fixed fields: a PUT's, then metadata.META_FIXED's.
PUTX_FIELDS_SIZE: Final = PUT_FIELDS_SIZE + metadata.META_FIXED_SIZE  # 56
# Where a PUTX's metadata lies from the record's start (metadata.META_FIXED, after the PUT fields);
# the compiled twin names the same offsets, checked as the PUT's are.
PUTX_NOT_BEFORE_AT: Final = PUT_EXPIRE_MS_AT + 8  # 33, u64 (0 = none)
PUTX_PRODUCER_AT: Final = PUTX_NOT_BEFORE_AT + 8  # 41, u64 (0 = none)
PUTX_SEQUENCE_AT: Final = PUTX_PRODUCER_AT + 8  # 49, u64
PUTX_KEY_LEN_AT: Final = PUTX_SEQUENCE_AT + 8  # 57, u16 (0 = no key)
PUTX_HEADER_COUNT_AT: Final = PUTX_KEY_LEN_AT + 2  # 59, u16
PUTX_HEADERS_LEN_AT: Final = PUTX_HEADER_COUNT_AT + 2  # 61, u32
#: Bytes a PUTX without key or headers adds around its payload (65): where its payload starts.
PUTX_OVERHEAD: Final = RECORD_HEADER_SIZE + PUTX_FIELDS_SIZE
if (PUTX_HEADERS_LEN_AT + 4, metadata.META_FIXED.format) != (PUTX_OVERHEAD, "<QQQHHI"):  # pragma: no cover
    raise TypeError("journaled.format.record: the PUTX offsets disagree with metadata.META_FIXED")
#: A compressed unit of PUT/PUTX records (section 4.5 of docs/format.md): ``first_id u64, count u32,
#: codec u8, raw_len u32`` then the codec's frame of the inner records.  Below 0x80: a reader that
#: does not know it must refuse it (it could not deliver the items inside).
TYPE_PUTZ: Final = 3
UNIT_FIELDS_STRUCT = struct.Struct("<QIBI")
#: A PUTZ's fixed fields: the least body a PUTZ has.
UNIT_FIELDS_SIZE: Final = UNIT_FIELDS_STRUCT.size  # 17
#: The codecs a PUTZ may name; another value is a newer writer's, refused ([F-44]).
CODEC_ZSTD: Final = 1
#: The most inner bytes one unit may hold ([F-45]): bounds what a reader decompresses.
MAX_UNIT_RAW: Final = 1 << 20
#: Types with this bit set may be skipped by a reader that does not know them; unknown types
#: without it mean "a newer writer wrote something you must understand" and are refused.
TYPE_SKIPPABLE: Final = 0x80

#: Largest payload any writer may put (``QueueConfig.max_item_size`` is at most this).
MAX_PAYLOAD: Final = 1 << 30
#: Largest body a record may declare: a PUT of MAX_PAYLOAD (24 bytes of fields before it).
#: Decoding is bounded by this, never by the current ``max_item_size``: lowering that setting
#: must not turn older, larger records into "damage"; and a larger length is garbage.
MAX_BODY: Final = MAX_PAYLOAD + PUT_FIELDS_SIZE


def record_seed(salt: int, offset: int) -> int:
    """Initial CRC value of the record at ``offset`` in a file with ``salt``.

    Files are capped below 4 GiB (see ``QueueConfig``), so ``offset`` fits 32 bits and two
    offsets in one file never share a seed.
    """
    return (salt ^ offset) & 0xFFFFFFFF


def encode_put(salt: int, offset: int, item_id: int, add_ms: int, expire_ms: int, payload: bytes) -> bytes:
    """Encode one PUT record destined for byte ``offset`` of a file with ``salt``."""
    rec = (
        PUT_HEADER_STRUCT.pack(0, PUT_FIELDS_SIZE + len(payload), TYPE_PUT, item_id, add_ms, expire_ms)
        + payload
    )
    crc = crc32c(memoryview(rec)[4:], (salt ^ offset) & 0xFFFFFFFF)
    return struct.pack("<I", crc) + rec[4:]


def encode_putx(
    salt: int, offset: int, item_id: int, add_ms: int, expire_ms: int, meta: Meta, payload: bytes
) -> bytes:
    """Encode one PUTX record (a PUT with ``meta``) destined for byte ``offset`` of a file with
    ``salt``.  The caller keeps the body within :data:`MAX_BODY` (the put checks its limits)."""
    body = PUT_FIELDS_STRUCT.pack(item_id, add_ms, expire_ms) + metadata.encode(meta) + payload
    return encode_record(salt, offset, TYPE_PUTX, body)


def encode_record(salt: int, offset: int, rtype: int, body: bytes) -> bytes:
    """Encode a record of any type (used for future/skippable types and in tests)."""
    if not 0 < rtype < 256:
        raise ValueError("record type must be 1..255")
    # perf: the CRC chained over (length and type, body), as encode_puts does, instead of over a
    # copy of the record: crc32c(a + b, seed) == crc32c(b, crc32c(a, seed)); one copy, not three
    # (every put with metadata comes here)
    tail = _RECORD_TAIL.pack(len(body), rtype)
    return CRC_STRUCT.pack(crc32c(body, crc32c(tail, (salt ^ offset) & 0xFFFFFFFF))) + tail + body


@attrs.frozen
class Put:
    """A decoded PUT record."""

    offset: int
    size: int  # bytes the whole record occupies on disk
    id: int
    add_ms: int
    expire_ms: int
    payload: bytes


@attrs.frozen
class PutX(Put):
    """A decoded PUTX record: a :class:`Put` whose item carries :class:`Meta` (``payload`` is
    the item's bytes only; ``size`` the whole record's)."""

    meta: Meta


@attrs.frozen
class Skipped:
    """A valid record of a skippable type this version does not interpret."""

    offset: int
    size: int
    rtype: int


@attrs.frozen
class Damage:
    """Why decoding stopped at ``offset``.

    ``incomplete`` is true when the bytes simply end before the record does (a torn tail, or a
    record still being written by another process); otherwise the bytes there are wrong.
    """

    offset: int
    reason: str
    incomplete: bool


@attrs.frozen
class Unit:
    """A decoded PUTZ record whose CRC verified: ``frame`` (the codec's bytes) is not yet
    decompressed (journaled.format.compressed does that and checks the inner records)."""

    offset: int
    size: int  # bytes the whole record occupies on disk
    first_id: int
    count: int
    codec: int
    raw_len: int
    frame: bytes

    @property
    def last_id(self) -> int:
        """The id of the unit's last item."""
        return self.first_id + self.count - 1


Decoded = Put | Skipped | Unit


def decode_one(
    buf: bytes | bytearray | memoryview, pos: int, base_offset: int, salt: int, max_body: int = MAX_BODY
) -> Decoded | Damage:
    """Decode the record starting at ``buf[pos]``, which lies at file offset ``base_offset + pos``.

    Never raises on bad bytes except :class:`UnsupportedVersion` for a valid record of a type
    that must be understood; returns :class:`Damage` instead.
    """
    offset = base_offset + pos
    avail = len(buf) - pos
    if avail < RECORD_HEADER_SIZE:
        # Fewer bytes than a header are always "incomplete", zeros or not: these bytes may be
        # the cut end of a read window, or the first bytes of a record still being appended,
        # and one record CRC in 256 starts with a zero byte.  Only the walker, which knows
        # where the file ends, may call them a torn tail ([F-16], [F-17]).
        return Damage(offset, "truncated record header", True)
    crc, length, rtype = RECORD_HEADER_STRUCT.unpack_from(buf, pos)
    if rtype == 0:
        return Damage(offset, "record type 0 (zero-filled or garbage)", False)
    if (
        length > max_body
        or (rtype == TYPE_PUT and length < PUT_FIELDS_SIZE)
        or (rtype == TYPE_PUTX and length < PUTX_FIELDS_SIZE)
        or (rtype == TYPE_PUTZ and length < UNIT_FIELDS_SIZE)
    ):
        return Damage(offset, f"implausible record length {length}", False)
    end = pos + RECORD_HEADER_SIZE + length
    if end > len(buf):
        return Damage(offset, "truncated record", True)
    view = memoryview(buf)
    try:
        if crc32c(view[pos + 4 : end], (salt ^ offset) & 0xFFFFFFFF) != crc:
            return Damage(offset, "record CRC mismatch", False)
        size = end - pos
        if rtype == TYPE_PUT:
            item_id, add_ms, expire_ms = PUT_FIELDS_STRUCT.unpack_from(buf, pos + RECORD_HEADER_SIZE)
            payload = bytes(view[pos + PUT_OVERHEAD : end])
            return Put(offset, size, item_id, add_ms, expire_ms, payload)
        if rtype == TYPE_PUTX:
            item_id, add_ms, expire_ms = PUT_FIELDS_STRUCT.unpack_from(buf, pos + RECORD_HEADER_SIZE)
            got = metadata.decode(view, pos + RECORD_HEADER_SIZE + PUT_FIELDS_SIZE, end)
            if isinstance(got, str):
                return Damage(offset, got, False)
            meta, start = got
            return PutX(offset, size, item_id, add_ms, expire_ms, bytes(view[start:end]), meta)
        if rtype == TYPE_PUTZ:
            first_id, count, codec, raw_len = UNIT_FIELDS_STRUCT.unpack_from(buf, pos + RECORD_HEADER_SIZE)
            if codec != CODEC_ZSTD:  # [F-44]: a codec of a newer writer
                raise UnsupportedVersion("<journal>", offset, f"compression codec {codec} is not supported")
            # [F-45]: fields that cannot describe the frame after them are damage, like a PUTX's
            if count == 0 or raw_len > MAX_UNIT_RAW or raw_len < count * PUT_OVERHEAD:
                return Damage(
                    offset, f"inconsistent compressed unit (count {count}, raw_len {raw_len})", False
                )
            frame = bytes(view[pos + RECORD_HEADER_SIZE + UNIT_FIELDS_SIZE : end])
            return Unit(offset, size, first_id, count, codec, raw_len, frame)
    finally:
        view.release()
    if rtype & TYPE_SKIPPABLE:
        return Skipped(offset, size, rtype)
    raise UnsupportedVersion("<journal>", offset, f"record type {rtype} is not supported")


def find_next_record(
    buf: bytes | bytearray | memoryview,
    pos: int,
    base_offset: int,
    salt: int,
    min_id: int,
    max_body: int = MAX_BODY,
) -> int | None:
    """Scan forward from ``buf[pos]`` for the next position where a PUT with id >= ``min_id``
    validates (or a compressed unit whose last id is >= ``min_id``, [F-16]); used to resume after
    mid-file damage.  Returns the buffer position or ``None``.

    Position-seeded CRCs make a false match a 2**-32 event per candidate offset, and the id
    check rejects stale records left over from an earlier life of the same offsets.
    """
    data = buf if isinstance(buf, (bytes, bytearray)) else bytes(buf)
    n = len(data)
    while pos + PUT_OVERHEAD <= n:
        # Only a PUT, PUTX or PUTZ can be accepted, so only offsets whose type byte is one of theirs are
        # candidates: jumping between them keeps a scan over megabytes of zeros or garbage fast.
        found = _PUT_TYPES.search(data, pos + RECORD_HEADER_SIZE - 1)
        if found is None:
            return None
        t = found.start()
        pos = t - (RECORD_HEADER_SIZE - 1)
        if pos + PUT_OVERHEAD > n:
            return None
        try:
            rec = decode_one(data, pos, base_offset, salt, max_body)
        except UnsupportedVersion:
            rec = Damage(pos, "unknown type", False)
        if (isinstance(rec, Put) and rec.id >= min_id) or (isinstance(rec, Unit) and rec.last_id >= min_id):
            return pos
        pos += 1
    return None


_PUT_TYPES = re.compile(b"[" + re.escape(bytes([TYPE_PUT, TYPE_PUTX, TYPE_PUTZ])) + b"]")
