"""A spool batch, byte for byte (docs/format.md section 12): pure code on bytes.

A batch is a head (magic, version, the batch key), its records (payload length, expiry, for a
version 2 batch the length of the item's metadata, then the metadata and the payload), and a
trailer (a record length of all ones, the record count, and a CRC32C of every byte before the
CRC).  disk/spoolfiles.py writes and reads batch files with these functions; the ledger of
adopted batches is disk/spoolledger.py.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Sequence

from crc32c import crc32c

from journaled.errors import CorruptJournal
from journaled.format import metadata
from journaled.format.metadata import Meta

MAGIC = b"\x89JSPL\r\n\x1a"
#: Version 1 records carry a payload and its expiry; version 2 records also carry an item's
#: metadata (a PUTX's not-before, producer tag, key and headers), written only when asked for,
#: so a batch without metadata stays readable by older owners.
VERSION = 1
VERSION_META = 2
HEAD = struct.Struct("<8sHH")  # magic, version, key length
_REC = struct.Struct("<IQ")  # payload length, expire ms (0 = never)
_REC_META = struct.Struct("<IQI")  # payload length, expire ms, metadata length (0 = none)
_END = 0xFFFFFFFF  # a record length of all ones opens the trailer
_TRAILER = struct.Struct("<IQI")  # _END, record count, CRC32C of every byte before the CRC
MAX_KEY_BYTES = 1024
MAX_PAYLOAD = (1 << 31) - 1

#: One record of a batch: ``(payload, expire_ms, meta)``, ``meta`` None for a plain item.
BatchRecord = tuple[bytes, int, Meta | None]


class NotABatch(Exception):
    """A spool entry that is not a batch file of ours (a directory, a symlink, a FIFO, a file
    without the batch magic): the spool leaves it exactly as it is."""


def head(raw_key: bytes, with_meta: bool) -> bytes:
    """A batch's first bytes: magic, version (2 when its records may carry metadata), key."""
    if len(raw_key) > MAX_KEY_BYTES:
        raise ValueError(f"batch key longer than {MAX_KEY_BYTES} bytes")
    return HEAD.pack(MAGIC, VERSION_META if with_meta else VERSION, len(raw_key)) + raw_key


def plain_record(payload: bytes, expire_ms: int) -> bytes:
    """A version 1 record."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError("payload too large for a spool batch")
    return _REC.pack(len(payload), expire_ms) + payload


def meta_record(payload: bytes, expire_ms: int, meta: Meta | None) -> bytes:
    """A version 2 record; ``meta`` within the limits of a put, else ``ValueError``."""
    if len(payload) > MAX_PAYLOAD:
        raise ValueError("payload too large for a spool batch")
    raw = b"" if meta is None or meta.empty else metadata.encode(meta)
    if meta is not None and raw:
        problem = meta_problem(meta, len(payload))
        if problem:
            raise ValueError(problem)
    return _REC_META.pack(len(payload), expire_ms, len(raw)) + raw + payload


def trailer_start(count: int) -> bytes:
    """The trailer's bytes before its CRC (which covers them too)."""
    return struct.pack("<IQ", _END, count)


_U32 = next(code for code in "IL" if array(code).itemsize == 4)


def record_heads(lengths: Sequence[int], expire_ms: int = 0) -> bytes:
    """The version 1 record heads (``length u32 | expire_ms u64``, little-endian) for payloads
    of these lengths, all with ``expire_ms``, concatenated (12 bytes a record).  Built by array
    slicing, not record by record: the sink frames a million records in a few calls.
    ``ValueError`` for a length beyond a batch's payload limit or an expiry outside u64."""
    if not 0 <= expire_ms < 1 << 64:
        raise ValueError("expire_ms must fit in 64 bits")
    if isinstance(lengths, array) and lengths.itemsize == 4:
        if lengths and min(lengths) < 0:
            raise ValueError("a payload length cannot be negative")
        lens = array(_U32)
        lens.frombytes(lengths.tobytes())  # Arrow's int32 lengths, reinterpreted, not converted
    else:
        lens = array(_U32, lengths)
    if lens and max(lens) > MAX_PAYLOAD:
        raise ValueError("payload too large for a spool batch")
    heads = array(_U32, bytes(12 * len(lens)))
    heads[0::3] = lens
    if expire_ms:
        heads[1::3] = array(_U32, [expire_ms & 0xFFFFFFFF]) * len(lens)
        heads[2::3] = array(_U32, [expire_ms >> 32]) * len(lens)
    if sys.byteorder == "big":
        heads.byteswap()
    return heads.tobytes()


def meta_problem(meta: Meta, payload_len: int) -> str | None:
    """Why ``meta`` is beyond what a put accepts (None when it is within the limits)."""
    if meta.key is not None and not 1 <= len(meta.key) <= metadata.MAX_KEY:
        return f"item key of {len(meta.key)} bytes (1 to {metadata.MAX_KEY})"
    if len(meta.headers) > metadata.MAX_HEADERS:
        return f"{len(meta.headers)} headers on one item (at most {metadata.MAX_HEADERS})"
    if any(len(name.encode("utf-8")) > metadata.MAX_HEADER_NAME for name in meta.headers):
        return f"a header name longer than {metadata.MAX_HEADER_NAME} bytes"
    if metadata.header_bytes(meta.headers) > metadata.MAX_HEADER_BYTES:
        return f"headers of more than {metadata.MAX_HEADER_BYTES} bytes on one item"
    if payload_len + metadata.encoded_size(meta) > metadata.MAX_PAYLOAD_WITH_META:
        return "payload and metadata too large for one record"
    return None


def parse(path: str, data: bytes) -> tuple[str, list[BatchRecord]]:
    """``(key, [(payload, expire_ms, meta), ...])`` of the batch ``data`` read from ``path``
    (``meta`` None for a plain item, always so in a version 1 batch).  :class:`NotABatch`
    without the batch magic; :class:`CorruptJournal` if it is ours but not complete and valid
    (metadata that does not parse or is beyond a put's limits included)."""
    if data[:8] != MAGIC:
        raise NotABatch(f"{path} does not start with the spool batch magic")
    if len(data) < HEAD.size + _TRAILER.size:
        raise CorruptJournal(path, 0, "spool batch truncated")
    _, version, klen = HEAD.unpack_from(data)
    if version not in (VERSION, VERSION_META):
        raise CorruptJournal(path, 8, f"spool batch version {version} is not supported")
    rec = _REC_META if version == VERSION_META else _REC
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if crc32c(memoryview(data)[:-4]) != crc:
        raise CorruptJournal(path, len(data) - 4, "spool batch CRC mismatch")
    pos = HEAD.size + klen
    out: list[BatchRecord] = []
    try:
        key = data[HEAD.size : pos].decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptJournal(path, HEAD.size, "batch key is not UTF-8") from None
    while True:
        if pos + 4 > len(data):
            raise CorruptJournal(path, pos, "spool batch truncated")
        if int.from_bytes(data[pos : pos + 4], "little") == _END:
            if pos + _TRAILER.size != len(data):
                raise CorruptJournal(path, pos, "spool batch trailer does not match its records")
            _, count, _ = _TRAILER.unpack_from(data, pos)
            if count != len(out):
                raise CorruptJournal(path, pos, "spool batch trailer does not match its records")
            return key, out
        if pos + rec.size > len(data):
            raise CorruptJournal(path, pos, "spool batch record overruns the file")
        fields = rec.unpack_from(data, pos)
        length, expire_ms, mlen = fields[0], fields[1], fields[2] if len(fields) > 2 else 0
        start = pos + rec.size
        if start + mlen + length > len(data):
            raise CorruptJournal(path, pos, "spool batch record overruns the file")
        meta = _meta_at(path, data, pos, start, start + mlen, length) if mlen else None
        start += mlen
        out.append((data[start : start + length], expire_ms, meta))
        pos = start + length


def _meta_at(path: str, data: bytes, pos: int, start: int, end: int, payload_len: int) -> Meta | None:
    decoded = metadata.decode(data, start, end)
    if isinstance(decoded, str) or decoded[1] != end:
        why = decoded if isinstance(decoded, str) else "metadata shorter than its length"
        raise CorruptJournal(path, pos, f"spool batch record: {why}")
    meta = decoded[0]
    problem = meta_problem(meta, payload_len)
    if problem:
        raise CorruptJournal(path, pos, f"spool batch record: {problem}")
    return None if meta.empty else meta


def key_of(first: bytes) -> str | None:
    """The key of a batch from its first ``HEAD.size + MAX_KEY_BYTES`` bytes (None if those
    are not a batch's head)."""
    try:
        magic, _, klen = HEAD.unpack_from(first)
        return first[HEAD.size : HEAD.size + klen].decode("utf-8") if magic == MAGIC else None
    except (struct.error, UnicodeDecodeError):
        return None
