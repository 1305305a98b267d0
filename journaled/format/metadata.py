"""What a PUTX record carries besides a PUT's fields: a not-before time, a producer's tag, a key
and headers (docs/format.md, section 4.4), as pure functions on bytes.

A PUTX body is the PUT body's three fields, then these, then the payload::

    not_before_ms u64 | producer u64 | sequence u64 | key_len u16 | header_count u16 |
    headers_len u32 | key | headers | payload

with each header ``name_len u8 | value_len u32 | name (UTF-8) | value``.  The limits below bound
what a put accepts; a reader accepts any metadata whose lengths are consistent with its record
(the CRC already vouched for the bytes), so lowering a limit never turns old records into damage.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

import attrs

#: not_before_ms, producer, sequence, key_len, header_count, headers_len.
META_FIXED = struct.Struct("<QQQHHI")
META_FIXED_SIZE: Final = META_FIXED.size  # 32
_HEADER_LENS = struct.Struct("<BI")

#: A key is 1 to this many bytes.
MAX_KEY: Final = 1024
#: At most this many headers per item.
MAX_HEADERS: Final = 64
#: A header name is 1 to this many bytes of UTF-8.
MAX_HEADER_NAME: Final = 255
#: The encoded header block (names, values and 5 bytes of lengths each) is at most this many bytes.
MAX_HEADER_BYTES: Final = 64 * 1024

#: The most a PUTX's payload and :func:`encoded_size` of its metadata may add up to: a PUT's
#: largest payload (record.MAX_PAYLOAD), so every PUTX body stays within record.MAX_BODY.
MAX_PAYLOAD_WITH_META: Final = 1 << 30

#: Headers of an item that has none: one shared, read-only, empty mapping.
NO_HEADERS: Final[Mapping[str, bytes]] = MappingProxyType({})


@attrs.frozen(slots=True)
class Meta:
    """The metadata of one item, as stored (``0`` = none for the three numbers).

    ``headers`` is a read-only mapping in the order the producer gave it.
    """

    not_before_ms: int = 0
    producer: int = 0
    sequence: int = 0
    key: bytes | None = None
    headers: Mapping[str, bytes] = NO_HEADERS

    @property
    def empty(self) -> bool:
        """Nothing to store: a plain PUT says it all."""
        return not (self.not_before_ms or self.producer or self.key is not None or self.headers)


def encoded_size(meta: Meta) -> int:
    """Bytes ``meta`` adds to a PUT body (the fixed part, the key, the header block)."""
    return META_FIXED_SIZE + len(meta.key or b"") + header_bytes(meta.headers)


def header_bytes(headers: Mapping[str, bytes]) -> int:
    """Bytes of the encoded header block."""
    return sum(_HEADER_LENS.size + len(k.encode("utf-8")) + len(v) for k, v in headers.items())


def encode(meta: Meta) -> bytes:
    """The metadata part of a PUTX body (what follows ``expire_ms`` and precedes the payload)."""
    headers = meta.headers
    block = header_block(headers) if headers else b""
    return encode_parts(meta.not_before_ms, meta.producer, meta.sequence, meta.key, len(headers), block)


def encode_parts(
    not_before_ms: int, producer: int, sequence: int, key: bytes | None, header_count: int, block: bytes
) -> bytes:
    """:func:`encode` of the metadata whose ``header_count`` headers encode to ``block`` (what
    :func:`header_block` and :func:`checked_headers` make): for a put that has them already."""
    if key is None:
        return META_FIXED.pack(not_before_ms, producer, sequence, 0, header_count, len(block)) + block
    fixed = META_FIXED.pack(not_before_ms, producer, sequence, len(key), header_count, len(block))
    return fixed + key + block


def header_block(headers: Mapping[str, bytes]) -> bytes:
    """The encoded header block of ``headers`` (each ``name_len u8 | value_len u32 | name | value``)."""
    block = bytearray()
    for name, value in headers.items():
        raw = name.encode("utf-8")
        block += _HEADER_LENS.pack(len(raw), len(value))
        block += raw
        block += value
    return bytes(block)


def checked_headers(headers: object) -> tuple[Mapping[str, bytes], bytes]:
    """``headers`` as a put stores them, and their encoded block (:func:`header_block`), made in
    one pass: a read-only mapping of names (non-empty ``str``, at most :data:`MAX_HEADER_NAME`
    bytes of UTF-8) to bytes (a bytearray or memoryview value is copied), at most
    :data:`MAX_HEADERS` of them and :data:`MAX_HEADER_BYTES` encoded; :data:`NO_HEADERS` and
    ``b""`` for an empty mapping.  ``TypeError``/``ValueError`` otherwise."""
    # perf: a dict (what nearly every put gives) skips the ABC's isinstance, a call into Python
    if type(headers) is not dict and not isinstance(headers, Mapping):
        raise TypeError(f"headers must be a mapping of str to bytes, not {type(headers).__name__}")
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"at most {MAX_HEADERS} headers per item, got {len(headers)}")
    out: dict[str, bytes] = {}
    block = bytearray()
    count = 0
    for name, value in headers.items():
        if type(name) is not str:
            raise TypeError(f"header names must be str, not {type(name).__name__}")
        try:
            raw = name.encode("utf-8")
        except UnicodeEncodeError:
            # a lone surrogate: a name too long says so first, as it would for any name
            raw = name.encode("utf-8", "surrogatepass")
            if len(raw) <= MAX_HEADER_NAME:
                raise ValueError(f"header name {name!r} is not valid Unicode text") from None
        if not raw or len(raw) > MAX_HEADER_NAME:
            raise ValueError(f"header name {name!r} must be 1 to {MAX_HEADER_NAME} bytes of UTF-8")
        if isinstance(value, bytes):
            data = value
        elif isinstance(value, (bytearray, memoryview)):
            data = bytes(value)
        else:
            raise TypeError(f"header {name!r}: values must be bytes, not {type(value).__name__}")
        out[name] = data
        block += _HEADER_LENS.pack(len(raw), len(data))
        block += raw
        block += data
        count += 1
    if not out:
        return NO_HEADERS, b""
    if len(block) > MAX_HEADER_BYTES:
        raise ValueError(f"headers take {len(block)} bytes, more than the {MAX_HEADER_BYTES} allowed")
    # a mapping whose items() named a header twice keeps the last value, as a dict does: encode that
    return MappingProxyType(out), bytes(block) if count == len(out) else header_block(out)


def decode(body: bytes | memoryview, at: int, end: int) -> tuple[Meta, int] | str:
    """Decode the metadata that starts at ``body[at]`` of a PUTX body ending at ``end``.

    Returns ``(meta, payload_start)``, or why the bytes are not metadata (a reason for
    ``Damage``): lengths past the record, a header block that does not parse into exactly its
    count of headers, a name that is empty, not UTF-8 or repeated.
    """
    if at + META_FIXED_SIZE > end:
        return "PUTX record too short for its metadata"
    not_before, producer, sequence, key_len, count, block_len = META_FIXED.unpack_from(body, at)
    at += META_FIXED_SIZE
    if at + key_len + block_len > end:
        return "PUTX metadata runs past its record"
    key = bytes(body[at : at + key_len]) if key_len else None
    at += key_len
    stop = at + block_len
    headers: dict[str, bytes] = {}
    for _ in range(count):
        if at + _HEADER_LENS.size > stop:
            return "PUTX header block is shorter than its count"
        name_len, value_len = _HEADER_LENS.unpack_from(body, at)
        at += _HEADER_LENS.size
        if name_len == 0 or at + name_len + value_len > stop:
            return "PUTX header runs past its block"
        try:
            name = bytes(body[at : at + name_len]).decode("utf-8")
        except UnicodeDecodeError:
            return "PUTX header name is not UTF-8"
        if name in headers:
            return "PUTX header name repeated"
        at += name_len
        headers[name] = bytes(body[at : at + value_len])
        at += value_len
    if at != stop:
        return "PUTX header block is longer than its headers"
    hdrs: Mapping[str, bytes] = MappingProxyType(headers) if headers else NO_HEADERS
    return Meta(not_before, producer, sequence, key, hdrs), stop
