"""The wire format between a queue's owner and the other processes using it, as pure code on bytes.

A *frame* is ``HEAD`` (two big-endian unsigned 32-bit lengths: header, payload), then a UTF-8
JSON object (the header), then the raw payload bytes.  Payloads are opaque bytes and are never
interpreted; nothing on this path is ever unpickled.  Requests are headers with an ``"op"``;
replies carry ``"ok": true`` or ``"ok": false`` with an ``"error"`` class name from
:data:`ERRORS` and a ``"message"``.  Several payloads travel as one payload plus their
``"lens"`` list.  Anything that breaks these rules raises :class:`ProtocolError`.

A message too big for a plain frame (a header over :data:`MAX_HEADER`: the stats of thousands of
readers; a payload over :data:`MAX_PAYLOAD`: one large item) travels as a *long frame*: ``HEAD``
with the header length :data:`LONG` and payload length 0, then :data:`LONG_HEAD` (the real
lengths, big-endian uint64), then the header and the payload.  Only such messages use it, so a
peer that predates long frames sees no difference in any exchange it could carry; the receiver
bounds a long frame by its own limits (:class:`Limits`), known before any byte of it is stored.
"""

from __future__ import annotations

import base64
import binascii
import json
import struct
from collections.abc import Mapping
from typing import Any, NamedTuple

from journaled import errors
from journaled.format.record import MAX_PAYLOAD as MAX_ITEM_SIZE

#: header length, payload length (both big-endian uint32)
HEAD = struct.Struct(">II")
#: a header is small: ops, names, numbers
MAX_HEADER = 1 << 20
#: a payload: one put_many (items up to ``max_item_size`` each, so a client splits batches)
MAX_PAYLOAD = 256 << 20
#: the header length that marks a long frame (module docstring)
LONG = 1 << 31
#: a long frame's real lengths: header, payload (both big-endian uint64)
LONG_HEAD = struct.Struct(">QQ")
#: the largest header a long frame may carry (the stats of many thousands of readers)
MAX_LONG_HEADER = 64 << 20
#: the socket's file name inside a queue directory
SOCKET_NAME = ".journaled.sock"
#: bumped on an incompatible change; a hello with another version is refused
VERSION = 1

#: error classes a reply may name; anything else arrives as a plain ``JournaledError``
ERRORS: dict[str, type[Exception]] = {
    name: getattr(errors, name)
    for name in (
        "Empty",
        "Full",
        "InvalidName",
        "ItemTooLarge",
        "QueueClosed",
        "UnknownRead",
        "UnknownReader",
        "JournaledError",
        "CorruptJournal",
        "JournalIOError",
        "QueueDirectoryGone",
        "OwnerLost",
    )
}
ERRORS.update({"TypeError": TypeError, "ValueError": ValueError})


class ProtocolError(errors.JournaledError):
    """A frame or message that breaks the wire format (the connection is closed)."""


class Limits(NamedTuple):
    """The largest header and payload one end accepts in a message (a long frame's bound)."""

    header: int
    payload: int


#: what a client accepts: a reply may carry one item as large as any queue allows
REPLY_LIMITS = Limits(MAX_LONG_HEADER, MAX_ITEM_SIZE)
#: what the owner accepts: a request's payload is one ``put_many`` (clients split larger ones)
REQUEST_LIMITS = Limits(MAX_LONG_HEADER, MAX_PAYLOAD)


#: the header of an untagged plain ``put`` (no ``ttl``, no ``expire_at``, no producer's tag: what a
#: client before exactly-once puts sent); never changed
PUT_REQUEST: dict[str, Any] = {"op": "put"}
_PUT_REQUEST = b'{"op":"put"}'
_OK_BYTES = b'{"ok":true}'


def tagged_put(producer: int, sequence: int) -> dict[str, Any]:
    """The header of a client's plain ``put`` carrying its producer's tag (``"tag"``: producer id,
    sequence), whose bytes :func:`dump_header` makes without the JSON encoder."""
    return {"op": "put", "tag": [producer, sequence]}


def dump_header(header: dict[str, Any]) -> bytes:
    """A header's JSON bytes."""
    if header is PUT_REQUEST:
        return _PUT_REQUEST  # perf: an old client's usual request, without the JSON encoder
    if len(header) == 2 and header.get("op") == "put":
        tag = header.get("tag")
        if type(tag) is list and len(tag) == 2 and type(tag[0]) is int and type(tag[1]) is int:
            return b'{"op":"put","tag":[%d,%d]}' % (tag[0], tag[1])  # perf: a client's usual request
    if len(header) == 1 and header.get("ok") is True:
        return _OK_BYTES  # perf: the reply to a commit, abort, release, reject
    return json.dumps(header, separators=(",", ":"), allow_nan=False).encode()


def put_reply(first: int, count: int, ids: list[int] | None = None) -> bytes:
    """The JSON bytes of the reply to a put: those of ``dump_header({"ok": True, "first": first,
    "count": count})``, written without the JSON encoder (the owner's most frequent reply).
    ``ids``, given when the stored ids are not ``first`` .. ``first + count - 1`` (a retried put
    some of whose items were stored before), is added as ``"ids"``."""
    if ids is None:
        return b'{"ok":true,"first":%d,"count":%d}' % (first, count)
    return dump_header({"ok": True, "first": first, "count": count, "ids": ids})


def prefix(hlen: int, plen: int) -> bytes:
    """The bytes before a frame's header: a plain ``HEAD`` when the lengths fit its limits,
    else a long frame's ``HEAD`` and ``LONG_HEAD``."""
    if hlen <= MAX_HEADER and plen <= MAX_PAYLOAD:
        return HEAD.pack(hlen, plen)
    return HEAD.pack(LONG, 0) + LONG_HEAD.pack(hlen, plen)


def encode(header: dict[str, Any], payload: bytes = b"") -> bytes:
    """One frame: lengths, JSON header, payload."""
    head = dump_header(header)
    return prefix(len(head), len(payload)) + head + payload


def lengths(raw: bytes | bytearray) -> tuple[int, int] | None:
    """The header and payload lengths announced by a frame's first ``HEAD.size`` bytes;
    ``None`` for a long frame (its lengths follow: :func:`long_lengths`)."""
    hlen, plen = HEAD.unpack(raw)
    if hlen == LONG and plen == 0:
        return None
    if not 2 <= hlen <= MAX_HEADER or plen > MAX_PAYLOAD:
        raise ProtocolError(f"bad frame lengths: header {hlen}, payload {plen}")
    return hlen, plen


def long_lengths(raw: bytes | bytearray, limits: Limits) -> tuple[int, int]:
    """A long frame's lengths from its ``LONG_HEAD.size`` bytes, checked against ``limits``."""
    hlen, plen = LONG_HEAD.unpack(raw)
    if not 2 <= hlen <= limits.header or plen > limits.payload:
        raise ProtocolError(
            f"a message of header {hlen} and payload {plen} bytes is more than this end accepts "
            f"(header {limits.header}, payload {limits.payload})"
        )
    return hlen, plen


def decode_header(raw: bytes) -> dict[str, Any]:
    """The JSON object of a header, or :class:`ProtocolError`."""
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise ProtocolError(f"header is not JSON: {exc}") from None
    if not isinstance(header, dict):
        raise ProtocolError("header is not a JSON object")
    return header


def split(payload: bytes | bytearray, lens: object) -> list[bytes]:
    """Cut ``payload`` into pieces of ``lens`` bytes; they must cover it exactly."""
    if not isinstance(lens, list) or not all(type(n) is int and n >= 0 for n in lens):
        raise ProtocolError("'lens' must be a list of non-negative integers")
    if sum(lens) != len(payload):
        raise ProtocolError("'lens' does not add up to the payload's length")
    out, pos = [], 0
    with memoryview(payload) as view:  # released on return: a bytearray may be emptied after
        for n in lens:
            out.append(bytes(view[pos : pos + n]))
            pos += n
    return out


def field(header: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any = ...) -> Any:
    """``header[key]`` checked to be of ``kind`` (``bool`` is not an ``int`` here), or
    :class:`ProtocolError`; ``default`` when missing, if given."""
    if key not in header:
        if default is ...:
            raise ProtocolError(f"missing field {key!r}")
        return default
    value = header[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    if isinstance(value, bool) and bool not in kinds:
        raise ProtocolError(f"field {key!r} has the wrong type")
    if not isinstance(value, kinds):
        raise ProtocolError(f"field {key!r} has the wrong type")
    return value


def text(raw: bytes) -> str:
    """Bytes of an item's metadata (a header's value, a key) as a JSON string (base64)."""
    return base64.b64encode(raw).decode("ascii")


def raw(value: object, what: str) -> bytes:
    """The bytes a :func:`text` string carries, or :class:`ProtocolError` naming ``what``."""
    if not isinstance(value, str):
        raise ProtocolError(f"{what} must be a base64 string")
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise ProtocolError(f"{what} is not base64") from None


def headers_text(headers: Mapping[str, bytes]) -> dict[str, str]:
    """An item's headers as a JSON object (each value :func:`text`)."""
    return {name: text(value) for name, value in headers.items()}


def headers_raw(value: object) -> dict[str, bytes]:
    """The headers a :func:`headers_text` object carries, or :class:`ProtocolError`."""
    if not isinstance(value, dict):
        raise ProtocolError("'headers' must be an object of names to base64 strings")
    return {name: raw(v, f"header {name!r}") for name, v in value.items()}


def error_reply(exc: BaseException) -> dict[str, Any]:
    """The reply header reporting ``exc`` (its class name if the other side knows it)."""
    name = type(exc).__name__
    if name not in ERRORS:
        name = next(
            (n for n, c in ERRORS.items() if isinstance(exc, c) and n != "JournaledError"), "JournaledError"
        )
    return {"ok": False, "error": name, "message": str(exc)}


def raise_error(header: dict[str, Any]) -> None:
    """Raise the exception a reply header describes (its constructor's own arguments are not
    sent: the instance carries the owner's message only)."""
    cls = ERRORS.get(str(header.get("error")), errors.JournaledError)
    exc = cls.__new__(cls)
    Exception.__init__(exc, str(header.get("message", "")))
    raise exc
