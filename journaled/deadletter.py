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
             "expire_at", "error_count"}; decoders ignore keys they do not know
    rest     the item's payload, exactly as it was put
"""

from __future__ import annotations

import json
import struct
from typing import Any

import attrs

from journaled.item import Item

MAGIC = b"JQDL"
VERSION = 1
_HEAD = struct.Struct(">4sBI")

#: Why an item left its reader (``DeadLetter.kind``).
KINDS = ("expired", "max_errors", "rejected")


@attrs.frozen(slots=True)
class DeadLetter(Item):
    """An item that left a reader for an ``expire_to``/``dead_letter`` destination.

    Attributes (besides :class:`Item`'s ``id``, ``data``, ``add_time``, ``expire_at`` and
    ``error_count``, all as on the reader the item left):
        kind: ``"expired"``, ``"max_errors"`` or ``"rejected"``.
        reason: a human-readable reason (``reject``'s ``reason`` for a rejected item).
        reader: the name of the reader the item left.
    """

    kind: str = "rejected"
    reason: str = ""
    reader: str = ""

    @classmethod
    def of(cls, item: Item, kind: str, reason: str, reader: str) -> DeadLetter:
        """The envelope for ``item`` leaving ``reader``."""
        return cls(item.id, item.data, item.add_time, item.expire_at, item.error_count, kind, reason, reader)

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
            },
            separators=(",", ":"),
        ).encode()
        return _HEAD.pack(MAGIC, VERSION, len(header)) + header + self.data

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
            )
        except (ValueError, TypeError, KeyError) as exc:
            raise ValueError(f"bad dead-letter envelope header: {exc}") from None


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected an integer, got {value!r}")
    return value


__all__ = ["DeadLetter"]
