"""Compressed units (PUTZ records, section 4.5 of docs/format.md), as pure functions on bytes.

A unit holds ordinary PUT/PUTX records (the *inner bytes*), encoded as if they were a file of
their own whose salt is ``unit_salt(file_salt, unit_offset)``, back to back from offset 0, then
compressed with zstd as one frame.  So every decoder of plain records decodes the inner bytes
unchanged (their CRCs also check the decompression), and the outer record's position-seeded CRC
checks the compressed bytes before anything is decompressed: a damaged unit loses exactly its own
items, ``first_id .. first_id + count - 1``.

The zstd binding is the standard library's ``compression.zstd`` (Python 3.14) or its backport
``backports.zstd`` (the ``zstd`` extra).  Without it, :func:`compress` and :func:`decode_unit`
raise :class:`~journaled.errors.CompressionUnavailable`; nothing else here needs it.
"""

from __future__ import annotations

import struct
import threading
from types import ModuleType
from typing import Final

from crc32c import crc32c

from journaled.errors import CompressionUnavailable
from journaled.format.record import (
    CODEC_ZSTD,
    CRC_STRUCT,
    MAX_UNIT_RAW,
    PUT_OVERHEAD,
    RECORD_HEADER_SIZE,
    TYPE_PUTZ,
    UNIT_FIELDS_SIZE,
    UNIT_FIELDS_STRUCT,
    Put,
    Unit,
)
from journaled.format.speedups import unit_records


def _binding() -> ModuleType | None:
    try:
        from compression import zstd  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        try:
            from backports import zstd  # type: ignore[import-not-found,import-untyped,no-redef,unused-ignore]
        except ImportError:
            return None
    return zstd  # type: ignore[no-any-return,unused-ignore]


#: The zstd module in use, or ``None`` when neither binding is installed (tests set it to ``None``
#: to play a machine without it).
zstd: ModuleType | None = _binding()

#: The codecs ``QueueConfig.compression`` accepts, by name.
CODECS: Final = {"zstd": CODEC_ZSTD}
#: The zstd level writers use.  Level 1: on JSON log lines it compresses nearly as well as level 3
#: (0.209 of the plain bytes against 0.207) and about 1.4 times faster, which is what keeps
#: put_many's rate near the plain one (scripts/bench_compression.py).
LEVEL: Final = 1
#: Bytes a unit adds around its frame: the record header and the unit's fields.
UNIT_OVERHEAD: Final = RECORD_HEADER_SIZE + UNIT_FIELDS_SIZE  # 26


def available() -> bool:
    """A zstd binding is installed."""
    return zstd is not None


def require(path: str, codec: str = "zstd") -> ModuleType:
    """The binding, or :class:`CompressionUnavailable` naming the extra (a queue configured with
    ``compression=codec`` cannot be opened without it)."""
    if zstd is None:
        raise CompressionUnavailable(path, 0, f"compression={codec!r} needs a zstd binding")
    return zstd


def unit_salt(salt: int, offset: int) -> int:
    """The salt the inner records of the unit at ``offset`` of a file with ``salt`` are encoded
    with ([F-43]): ``(salt ^ offset) & 0xFFFFFFFF``."""
    return (salt ^ offset) & 0xFFFFFFFF


def encode_unit(salt: int, offset: int, first_id: int, count: int, inner: bytes | bytearray) -> bytes | None:
    """The PUTZ record at ``offset`` of a file with ``salt`` holding ``inner`` (``count`` records
    with ids ``first_id ..``, encoded with :func:`unit_salt`), or ``None`` when compressing does
    not make it smaller than the plain records (the caller writes those instead).  ``inner`` must
    not exceed :data:`MAX_UNIT_RAW`."""
    out = bytearray()
    return bytes(out) if append_unit(out, salt, offset, first_id, count, inner) else None


def append_unit(
    out: bytearray, salt: int, offset: int, first_id: int, count: int, inner: bytes | bytearray
) -> bool:
    """Append to ``out`` the record :func:`encode_unit` makes and return True, or append nothing
    and return False when the unit would not be smaller than ``inner``.  (perf: the writer's
    path; the frame is copied once, into ``out``, and its CRC is chained over the header
    instead of a copy of the whole record.)"""
    if not 0 < len(inner) <= MAX_UNIT_RAW:
        raise ValueError(f"a unit holds 1..{MAX_UNIT_RAW} inner bytes, not {len(inner)}")
    frame = _compress(require("<journal>"), inner)
    if UNIT_OVERHEAD + len(frame) >= len(inner):
        return False
    head = _UNIT_HEAD.pack(UNIT_FIELDS_SIZE + len(frame), TYPE_PUTZ, first_id, count, CODEC_ZSTD, len(inner))
    start = len(out)
    try:
        out += CRC_STRUCT.pack(crc32c(frame, crc32c(head, (salt ^ offset) & 0xFFFFFFFF)))
        out += head
        out += frame
    except BaseException:
        del out[start:]  # never a part of a record in the writer's buffer (MemoryError)
        raise
    return True


#: What a PUTZ record's CRC covers before its frame: the record's length and type, then the
#: unit's fields (``UNIT_FIELDS_STRUCT``), in one pack.
_UNIT_HEAD: Final = struct.Struct("<IB" + UNIT_FIELDS_STRUCT.format.lstrip("<"))
if CRC_STRUCT.size + _UNIT_HEAD.size != UNIT_OVERHEAD:  # pragma: no cover
    raise ImportError("the PUTZ header layout disagrees with UNIT_OVERHEAD")


_local = threading.local()


def _compress(z: ModuleType, data: bytes | bytearray) -> bytes:
    """One whole zstd frame of ``data``, by this thread's compressor (perf: making a compression
    context per unit costs about a fifth of the compression itself)."""
    c = getattr(_local, "compressor", None)
    if c is None or _local.module is not z:
        c = z.ZstdCompressor(level=LEVEL)
        _local.compressor, _local.module = c, z
    try:
        frame: bytes = c.compress(data, mode=c.FLUSH_FRAME)
    except BaseException:
        _local.compressor = None  # a frame cut short: never reuse its state
        raise
    return frame


def inflate(unit: Unit) -> bytes | str:
    """The inner bytes of ``unit``, or why they cannot be (damage, [F-45]): the frame must be one
    whole zstd frame decompressing to exactly ``raw_len`` bytes.  Decompression stops one byte
    past ``raw_len``, so a hostile frame never costs more memory than :data:`MAX_UNIT_RAW`."""
    z = zstd
    if z is None:
        raise CompressionUnavailable("<journal>", unit.offset, "compressed records need a zstd binding")
    d = z.ZstdDecompressor()
    try:
        raw: bytes = d.decompress(unit.frame, max_length=unit.raw_len + 1)
    except z.ZstdError as exc:
        return f"compressed unit does not decompress ({exc})"
    if len(raw) != unit.raw_len or not d.eof or d.unused_data:
        return f"compressed unit decompresses to other than its {unit.raw_len} bytes"
    return raw


def decode_unit(unit: Unit, salt: int) -> list[Put] | str:
    """The records of ``unit`` (a PUTZ of a file with ``salt``), each with the unit's ``offset``
    and ``size`` (a cursor stopped inside a unit keeps the unit's position and the id it expects
    next), or why the unit is damaged ([F-45]): its inner bytes must be exactly ``count`` valid
    PUT/PUTX records with ids ``first_id ..`` in order."""
    got = unit_contents(unit, salt)
    return got if isinstance(got, str) else got[0]


def unit_contents(unit: Unit, salt: int) -> tuple[list[Put], list[int]] | str:
    """:func:`decode_unit`'s records and the running sums of their payload sizes (``sizes[i]``:
    bytes of the first ``i``), or why the unit is damaged.  The inner bytes are decompressed once
    and decoded, checked and relabelled in one pass of the codec (``speedups.unit_records``: the C
    twin builds each record with the unit's offset and size, no Python code per record)."""
    raw = inflate(unit)
    if isinstance(raw, str):
        return raw
    return unit_records(raw, salt, unit.offset, unit.size, unit.first_id, unit.count)


#: A unit never holds a record whose payload could not fit with its header.
MAX_INNER_PAYLOAD: Final = MAX_UNIT_RAW - PUT_OVERHEAD
