"""What an ``expire_to`` / ``dead_letter`` destination receives: :class:`DeadLetter`.

A callable destination is called with the :class:`DeadLetter` itself (an :class:`Item` with
``kind``, ``reason`` and ``reader`` added, so code written for items keeps working).  A
destination that is a queue (``put(bytes)``) receives :meth:`DeadLetter.encode`'s bytes: a
small versioned header and the payload untouched, decoded by :meth:`DeadLetter.decode`.

Envelope format (version 1, docs/format.md "Dead-letter envelope")::

    b"JQDL"  magic (4 bytes)
    u8       version (1)
    u32 BE   header length n
    n bytes  header: a UTF-8 JSON object {"kind", "reason", "reader", "id", "add_time",
             "expire_at", "error_count"}, and for an item put with them "key" (hex), "headers"
             ({name: hex value}) and "not_before" (epoch seconds); decoders ignore keys they do
             not know, so older ones read these envelopes (without the metadata)
    rest     the item's payload, exactly as it was put
"""

from __future__ import annotations

import json
import struct
from collections.abc import Mapping
from typing import Any

import attrs

from journaled.format.metadata import NO_HEADERS, Meta
from journaled.item import Item, put_headers, put_key

MAGIC = b"JQDL"
VERSION = 1
_HEAD = struct.Struct(">4sBI")

#: Why an item left its reader (``DeadLetter.kind``).
KINDS = ("expired", "max_errors", "rejected")
#: The reader counter (``ReaderStats`` field) each kind is counted in.
COUNTED_IN = {"expired": "expired", "max_errors": "dead_lettered", "rejected": "rejected"}


@attrs.frozen(slots=True)
class DeadLetter(Item):
    """An item that left a reader for an ``expire_to``/``dead_letter`` destination.

    Attributes (besides :class:`Item`'s ``id``, ``data``, ``add_time``, ``expire_at`` and
    ``error_count``, all as on the reader the item left):
        kind: ``"expired"``, ``"max_errors"`` or ``"rejected"``.
        reason: a human-readable reason (``reject``'s ``reason`` for a rejected item).
        reader: the name of the reader the item left.
        headers, key, not_before: the item's, as put (empty, None, None for a plain item).
    """

    kind: str = "rejected"
    reason: str = ""
    reader: str = ""
    stored: Meta | None = None

    @property
    def headers(self) -> Mapping[str, bytes]:
        """The item's headers (name -> bytes, read-only), empty when none were put."""
        return NO_HEADERS if self.stored is None else self.stored.headers

    @property
    def key(self) -> bytes | None:
        """The bytes naming the item, or None."""
        return None if self.stored is None else self.stored.key

    @property
    def not_before(self) -> float | None:
        """When the item became deliverable (epoch seconds), or None."""
        ms = 0 if self.stored is None else self.stored.not_before_ms
        return ms / 1000.0 if ms else None

    @property
    def meta(self) -> Meta | None:
        """The item's metadata as stored, or None."""
        return self.stored

    @classmethod
    def of(cls, item: Item, kind: str, reason: str, reader: str) -> DeadLetter:
        """The envelope for ``item`` leaving ``reader`` (its headers, key and not-before kept)."""
        return cls(
            item.id,
            item.data,
            item.add_time,
            item.expire_at,
            item.error_count,
            kind,
            reason,
            reader,
            item.meta,
        )

    def encode(self) -> bytes:
        """The bytes a queue destination receives (see the module docstring)."""
        header = json.dumps(
            {
                "kind": self.kind,
                "reason": self.reason,
                "reader": self.reader,
                "id": self.id,
                "add_time": self.add_time,
                "expire_at": self.expire_at,
                "error_count": self.error_count,
                **self._meta_fields(),
            },
            separators=(",", ":"),
        ).encode()
        return _HEAD.pack(MAGIC, VERSION, len(header)) + header + self.data

    def _meta_fields(self) -> dict[str, Any]:
        meta = self.stored
        if meta is None:
            return {}
        out: dict[str, Any] = {}
        if meta.key is not None:
            out["key"] = meta.key.hex()
        if meta.headers:
            out["headers"] = {name: value.hex() for name, value in meta.headers.items()}
        if meta.not_before_ms:
            out["not_before"] = meta.not_before_ms / 1000.0
        return out

    @classmethod
    def decode(cls, data: bytes | bytearray | memoryview) -> DeadLetter:
        """Read an envelope written by :meth:`encode`; ``ValueError`` if ``data`` is not one."""
        raw = bytes(data)
        if len(raw) < _HEAD.size:
            raise ValueError("not a journaled dead-letter envelope: too short")
        magic, version, n = _HEAD.unpack_from(raw)
        if magic != MAGIC:
            raise ValueError("not a journaled dead-letter envelope: bad magic")
        if version != VERSION:
            raise ValueError(f"unsupported dead-letter envelope version {version}")
        end = _HEAD.size + n
        if end > len(raw):
            raise ValueError("truncated dead-letter envelope header")
        try:
            head: Any = json.loads(raw[_HEAD.size : end])
            expire_at = head["expire_at"]
            return cls(
                _int(head["id"]),
                raw[end:],
                float(head["add_time"]),
                None if expire_at is None else float(expire_at),
                _int(head["error_count"]),
                str(head["kind"]),
                str(head["reason"]),
                str(head["reader"]),
                _meta(head),
            )
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"bad dead-letter envelope header: {exc}") from None


def _meta(head: dict[str, Any]) -> Meta | None:
    """The metadata an envelope header carries (only what a reader may use again: the producer's
    tag stays with the original put), or None."""
    key = head.get("key")
    headers = head.get("headers")
    not_before = head.get("not_before")
    if key is None and not headers and not not_before:
        return None
    hdrs = put_headers({str(k): bytes.fromhex(v) for k, v in headers.items()} if headers else None)
    nb = 0 if not not_before else round(float(not_before) * 1000)
    return Meta(nb, 0, 0, None if key is None else put_key(bytes.fromhex(key)), hdrs)


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


__all__ = ["DeadLetter"]
