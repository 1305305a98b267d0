"""Turning Python objects into item payloads and back, for the object-level APIs.

:class:`journaled.Queue` and the libkestrel-style wrappers store objects; the journal stores
bytes.  A *serializer* is anything with ``dumps(obj)`` and ``loads(data)`` -- the :mod:`pickle`
and :mod:`json` modules themselves qualify (a ``str`` from ``dumps`` is stored as UTF-8).
Failures in either direction surface as :class:`~journaled.errors.SerializationError`.
"""

from __future__ import annotations

import json
import pickle
from typing import Any, Protocol

from journaled.errors import SerializationError


class Serializer(Protocol):
    """What the object-level APIs need: ``dumps`` to bytes (or str, stored as UTF-8) and
    ``loads`` from bytes."""

    def dumps(self, obj: Any, /) -> bytes | str: ...

    def loads(self, data: bytes, /) -> Any: ...


class PickleSerializer:
    """:mod:`pickle` with an explicit protocol (the default serializer of :class:`journaled.Queue`).

    Only unpickle data you wrote yourself: unpickling runs code chosen by whoever wrote the bytes.
    """

    def __init__(self, protocol: int | None = None) -> None:
        self.protocol = protocol

    def dumps(self, obj: Any, /) -> bytes:
        return pickle.dumps(obj, protocol=self.protocol)

    def loads(self, data: bytes, /) -> Any:
        return pickle.loads(data)


class JsonSerializer:
    """Compact UTF-8 JSON.  Tuples come back as lists, as JSON has no tuples."""

    def __init__(self, *, sort_keys: bool = False) -> None:
        self.sort_keys = sort_keys

    def dumps(self, obj: Any, /) -> bytes:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, sort_keys=self.sort_keys).encode()

    def loads(self, data: bytes, /) -> Any:
        return json.loads(data)


class BytesSerializer:
    """No conversion: items must be ``bytes``-like and come back as ``bytes``."""

    def dumps(self, obj: Any, /) -> bytes:
        if isinstance(obj, bytes):
            return obj
        if isinstance(obj, (bytearray, memoryview)):
            return bytes(obj)
        raise TypeError(f"BytesSerializer stores bytes, bytearray or memoryview, not {type(obj).__name__}")

    def loads(self, data: bytes, /) -> bytes:
        return data


def dumps(serializer: Serializer, obj: Any) -> bytes:
    """``serializer.dumps(obj)`` as bytes; any failure becomes :class:`SerializationError`."""
    try:
        out = serializer.dumps(obj)
    except Exception as exc:
        raise SerializationError(f"cannot serialize {type(obj).__name__}: {exc}") from exc
    if isinstance(out, str):
        return out.encode()
    if isinstance(out, (bytes, bytearray, memoryview)):
        return bytes(out)
    raise SerializationError(f"serializer.dumps returned {type(out).__name__}, not bytes or str")


def loads(serializer: Serializer, data: bytes) -> Any:
    """``serializer.loads(data)``; any failure becomes :class:`SerializationError`."""
    try:
        return serializer.loads(data)
    except Exception as exc:
        raise SerializationError(f"cannot deserialize a {len(data)}-byte payload: {exc}") from exc


__all__ = ["BytesSerializer", "JsonSerializer", "PickleSerializer", "Serializer", "dumps", "loads"]
