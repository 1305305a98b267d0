"""The de-duplication index ``<queue>.dedup``: the keys of the window whose records were archived.

``QueueConfig.dedup_window`` promises that a key put again within the window is not stored again.
The window's keys live in memory (owner/dedup.py) and are rebuilt at open from the journal's
records, but journal files are archived as soon as every reader has passed them, often long
before the window ends.  So before archiving, the owner writes every key of its window (key, id of
its first put, that put's add time) to this small file, replaced atomically like a checkpoint;
the next owner reads it back for the ids the journal no longer holds.  The journal stays the
truth for every id it still holds.  docs/format.md, section 16, has the layout byte by byte.

A missing file means no archived key; a damaged one (wrong magic, length or CRC; another
version) is logged and ignored, never fatal and never deleted: the next write replaces it.
"""

from __future__ import annotations

import array
import logging
import os
import struct
import sys
import time
from collections.abc import Iterable, Sequence

import attrs
from crc32c import crc32c

from journaled.disk import fileio
from journaled.errors import CorruptJournal, UnsafeDirectory, UnsupportedVersion
from journaled.format.metadata import MAX_KEY

log = logging.getLogger("journaled")

#: ``"\x89JDDP\r\n\x1a"``: the checkpoint magic's pattern (section 7), "DDP" for de-duplication
INDEX_MAGIC = b"\x89JDDP\r\n\x1a"
INDEX_VERSION = 1
# magic(8) version(u16) flags(u16) window_ms(u64) written_ms(u64) count(u32)
_FIXED = struct.Struct("<8sHHQQI")
_BIG_ENDIAN = sys.byteorder == "big"

#: One entry: ``(key, id of its first put within the window, that put's add time in ms)``.
Entry = tuple[bytes, int, int]


@attrs.frozen
class DedupIndex:
    """A decoded index: ``entries`` in add order, pruned by its writer to ``window_ms`` before
    ``written_ms`` (both in ms; ``written_ms`` is the writer's wall clock)."""

    window_ms: int
    written_ms: int
    entries: tuple[Entry, ...]


def now_ms() -> int:
    """The wall clock in ms (a function, so tests can move it)."""
    return time.time_ns() // 1_000_000


def index_path(directory: str, queue: str) -> str:
    """``<queue>.dedup`` inside ``directory``."""
    return os.path.join(directory, f"{queue}.dedup")


def _column(code: str, values: Iterable[int]) -> bytes:
    """``values`` as little-endian integers (``code``: ``"Q"`` u64, ``"H"`` u16)."""
    column = array.array(code, values)
    if _BIG_ENDIAN:
        column.byteswap()
    return column.tobytes()


def _read_column(code: str, buf: memoryview) -> list[int]:
    column = array.array(code)
    column.frombytes(buf)
    if _BIG_ENDIAN:
        column.byteswap()
    return column.tolist()


def encode_index(
    keys: Sequence[bytes], ids: Sequence[int], add_ms: Sequence[int], window_ms: int, written_ms: int
) -> bytes:
    """The bytes of an index file: entry *i* is ``keys[i]``, first put as ``ids[i]`` at
    ``add_ms[i]``, in add order.  Columns (all ids, all add times, all key lengths, all keys), so
    encoding and decoding are a few C-level loops, not one Python step per key."""
    parts = [
        _FIXED.pack(INDEX_MAGIC, INDEX_VERSION, 0, window_ms, written_ms, len(keys)),
        _column("Q", ids),
        _column("Q", add_ms),
        _column("H", map(len, keys)),
        b"".join(keys),
    ]
    body = b"".join(parts)
    return body + struct.pack("<I", crc32c(body))


def decode_index(buf: bytes, path: str = "<dedup index>") -> DedupIndex:
    """Decode an index file, raising :class:`CorruptJournal` for a wrong magic, length, key
    length or CRC, and :class:`UnsupportedVersion` for another version."""
    if len(buf) < _FIXED.size + 4:
        raise CorruptJournal(path, len(buf), "dedup index truncated")
    magic, version, _flags, window_ms, written_ms, count = _FIXED.unpack_from(buf)
    if magic != INDEX_MAGIC:
        raise CorruptJournal(path, 0, "bad dedup index magic")
    if version != INDEX_VERSION:  # another version may lay out the rest otherwise
        raise UnsupportedVersion(path, 8, f"dedup index version {version} is not supported")
    view = memoryview(buf)
    keys_at = _FIXED.size + 18 * count
    if len(buf) < keys_at + 4:
        raise CorruptJournal(path, len(buf), "dedup index length mismatch")
    (crc,) = struct.unpack_from("<I", buf, len(buf) - 4)
    if crc32c(view[:-4]) != crc:
        raise CorruptJournal(path, len(buf) - 4, "dedup index CRC mismatch")
    ids = _read_column("Q", view[_FIXED.size : _FIXED.size + 8 * count])
    times = _read_column("Q", view[_FIXED.size + 8 * count : _FIXED.size + 16 * count])
    lengths = _read_column("H", view[_FIXED.size + 16 * count : keys_at])
    if count and not 1 <= min(lengths) <= max(lengths) <= MAX_KEY:
        raise CorruptJournal(path, _FIXED.size + 16 * count, "dedup index: impossible key length")
    if keys_at + sum(lengths) + 4 != len(buf):
        raise CorruptJournal(path, len(buf), "dedup index length mismatch")
    keys = []
    pos = keys_at
    for n in lengths:
        keys.append(bytes(view[pos : pos + n]))
        pos += n
    return DedupIndex(window_ms, written_ms, tuple(zip(keys, ids, times)))


def write_index(
    path: str,
    keys: Sequence[bytes],
    ids: Sequence[int],
    add_ms: Sequence[int],
    window_ms: int,
    written_ms: int,
    mode: int,
) -> None:
    """Replace the index at ``path`` (:func:`encode_index`'s arguments) atomically: temp file,
    fsync, rename, fsync of the directory."""
    fileio.write_atomic(path, encode_index(keys, ids, add_ms, window_ms, written_ms), mode)


def read_index(path: str) -> DedupIndex | None:
    """The index at ``path``; ``None`` when there is none, or (logged) when it is damaged."""
    try:
        raw = fileio.ops.read_file(path)
    except FileNotFoundError:
        return None
    except UnsafeDirectory:
        raise  # a planted link: refused, never followed (as for every file of ours)
    except OSError as exc:  # e.g. a directory of that name: not ours to remove
        log.warning("dedup index %s cannot be read (%s); only the journal's keys are known", path, exc)
        return None
    try:
        return decode_index(raw, path)
    except (CorruptJournal, UnsupportedVersion) as exc:
        log.warning(
            "dedup index %s is not usable (%s); only the keys the journal still holds are known, "
            "so a key whose journal file was archived may be stored again",
            path,
            exc,
        )
        return None
