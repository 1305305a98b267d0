"""The spool's files: batch files and the adoption ledger, byte for byte (docs/format.md).

How another process hands items to a queue it does not own: :func:`spool_put` (or Spark's
executors through :class:`BatchWriter` and :func:`publish`) writes a complete batch file (records,
then a trailer with the count and a CRC32C of everything before it) under a temporary name,
fsyncs it and renames it into ``<queue dir>/spool/``.  A batch is therefore either absent or
whole.  The owner adopts it (owner/adoption.py) and records that in the :class:`Ledger`.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import errno
import logging
import os
import stat
import struct
import sys
import time
from array import array
from collections.abc import Iterable, Sequence
from typing import BinaryIO

from crc32c import crc32c

from journaled.disk import fileio
from journaled.errors import CorruptJournal, UnsafeDirectory
from journaled.format import metadata
from journaled.format.metadata import Meta
from journaled.item import expire_ms

log = logging.getLogger("journaled")

SPOOL_DIR = "spool"
LEDGER = "ledger"
REJECTED = "rejected"
STAGING = "staging"
BATCH_SUFFIX = ".batch"

_MAGIC = b"\x89JSPL\r\n\x1a"
#: Version 1 records carry a payload and its expiry; version 2 records also carry an item's
#: metadata (a PUTX's not-before, producer tag, key and headers), written only when asked for,
#: so a batch without metadata stays readable by older owners.
_VERSION = 1
_VERSION_META = 2
_HEAD = struct.Struct("<8sHH")  # magic, version, key length
_REC = struct.Struct("<IQ")  # payload length, expire ms (0 = never)
_REC_META = struct.Struct("<IQI")  # payload length, expire ms, metadata length (0 = none)
_END = 0xFFFFFFFF  # a record length of all ones opens the trailer
_TRAILER = struct.Struct("<IQI")  # _END, record count, CRC32C of every byte before the CRC
MAX_KEY_BYTES = 1024
MAX_PAYLOAD = (1 << 31) - 1

#: One record of a batch: ``(payload, expire_ms, meta)``, ``meta`` None for a plain item.
BatchRecord = tuple[bytes, int, Meta | None]
#: The owner rewrites the ledger as one compacted key block once more lines than this follow it,
#: so a reader of the ledger (``spool_put``) parses at most this many lines one by one.
LEDGER_TAIL_LIMIT = 128

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


class NotABatch(Exception):
    """A spool entry that is not a batch file of ours (a directory, a symlink, a FIFO, a file
    without the batch magic): the spool leaves it exactly as it is."""


def _read_regular(path: str, limit: int = -1) -> bytes:
    """The bytes of ``path`` (up to ``limit``), never through a symlink and never blocking on a
    FIFO; :class:`NotABatch` unless it is a regular file."""
    try:
        fd = fileio.ops.open(path, os.O_RDONLY | _NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        if os.path.islink(path):
            raise NotABatch(f"{path} is a symlink") from None
        if isinstance(exc, IsADirectoryError):
            raise NotABatch(f"{path} is a directory") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotABatch(f"{path} is not a regular file")
        size = st.st_size if limit < 0 else min(st.st_size, limit)
        chunks = []
        pos = 0
        while pos < size:
            chunk = fileio.ops.pread(fd, size - pos, pos)
            if not chunk:
                break
            chunks.append(chunk)
            pos += len(chunk)
        return b"".join(chunks)
    finally:
        fileio.ops.close(fd)


def spool_dir(queue_dir: str | os.PathLike[str]) -> str:
    """The spool folder of a queue directory."""
    return os.path.join(os.fspath(queue_dir), SPOOL_DIR)


# ------------------------------------------------------------------------------ batch files
class BatchWriter:
    """Write one batch file incrementally (used by :func:`spool_put` and by Spark executors).

    ``with_meta=True`` writes a version 2 batch, whose records may carry metadata (``add``'s
    ``meta``); otherwise a version 1 batch.  ``finish()`` writes the trailer and fsyncs; the
    caller then renames the file into place.
    """

    def __init__(self, path: str, key: str, *, with_meta: bool = False) -> None:
        raw_key = key.encode("utf-8")
        if len(raw_key) > MAX_KEY_BYTES:
            raise ValueError(f"batch key longer than {MAX_KEY_BYTES} bytes")
        self.path = path
        self.count = 0
        self.with_meta = with_meta
        self._crc = 0
        # O_EXCL and O_NOFOLLOW: a name planted in our place (a symlink) fails, never written through
        fd = fileio.ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        self._f: BinaryIO = os.fdopen(fd, "wb")  # noqa: SIM115 - closed in finish/discard
        version = _VERSION_META if with_meta else _VERSION
        self._emit(_HEAD.pack(_MAGIC, version, len(raw_key)) + raw_key)

    def _emit(self, data: bytes | bytearray | memoryview) -> None:
        self._crc = crc32c(data, self._crc)
        self._f.write(data)

    def add(
        self, payload: bytes | bytearray | memoryview, expire_ms: int = 0, meta: Meta | None = None
    ) -> None:
        """Append one record; ``meta`` (a version 2 batch only) within the limits of a put
        (format/metadata.py), else ``ValueError`` and nothing written."""
        payload = bytes(payload)
        if len(payload) > MAX_PAYLOAD:
            raise ValueError("payload too large for a spool batch")
        if not self.with_meta:
            if meta is not None and not meta.empty:
                raise ValueError("item metadata needs a batch written with_meta=True")
            self._emit(_REC.pack(len(payload), expire_ms) + payload)
        else:
            raw = b"" if meta is None or meta.empty else metadata.encode(meta)
            if meta is not None and raw:
                problem = meta_problem(meta, len(payload))
                if problem:
                    raise ValueError(problem)
            self._emit(_REC_META.pack(len(payload), expire_ms, len(raw)) + raw + payload)
        self.count += 1

    def add_framed(self, records: bytes | bytearray | memoryview, count: int) -> None:
        """Append ``count`` version 1 records already framed as ``length u32 | expire_ms u64 |
        payload`` (heads from :func:`record_heads`): one write and one CRC update for the lot,
        for a caller that holds its payloads as one column.  The framing is the caller's word;
        a reader still checks it, with the CRC, before adopting the batch."""
        if self.with_meta:
            raise ValueError("framed records are version 1 records: this batch is written with_meta")
        if count < 0:
            raise ValueError("count must not be negative")
        self._emit(records)
        self.count += count

    def finish(self) -> None:
        self._emit(struct.pack("<IQ", _END, self.count))
        self._f.write(struct.pack("<I", self._crc))
        self._f.flush()
        fileio.ops.fsync(self._f.fileno())
        self._f.close()

    def discard(self) -> None:
        self._f.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


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


def read_batch(path: str) -> tuple[str, list[BatchRecord]]:
    """``(key, [(payload, expire_ms, meta), ...])`` of a batch file (``meta`` None for a plain
    item, always so in a version 1 batch).  :class:`NotABatch` if the entry is not one of ours
    at all (not a regular file, or without the batch magic); :class:`CorruptJournal` if it is
    ours but not complete and valid (metadata that does not parse or is beyond a put's limits
    included)."""
    data = _read_regular(path)
    if data[:8] != _MAGIC:
        raise NotABatch(f"{path} does not start with the spool batch magic")
    if len(data) < _HEAD.size + _TRAILER.size:
        raise CorruptJournal(path, 0, "spool batch truncated")
    _, version, klen = _HEAD.unpack_from(data)
    if version not in (_VERSION, _VERSION_META):
        raise CorruptJournal(path, 8, f"spool batch version {version} is not supported")
    rec = _REC_META if version == _VERSION_META else _REC
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if crc32c(memoryview(data)[:-4]) != crc:
        raise CorruptJournal(path, len(data) - 4, "spool batch CRC mismatch")
    pos = _HEAD.size + klen
    out: list[BatchRecord] = []
    try:
        key = data[_HEAD.size : pos].decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptJournal(path, _HEAD.size, "batch key is not UTF-8") from None
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


def read_batch_key(path: str) -> str | None:
    """Just the key of a batch file (``None`` if unreadable or not a batch of ours)."""
    try:
        head = _read_regular(path, _HEAD.size + MAX_KEY_BYTES)
        magic, _, klen = _HEAD.unpack_from(head)
        return head[_HEAD.size : _HEAD.size + klen].decode("utf-8") if magic == _MAGIC else None
    except (OSError, NotABatch, struct.error, UnicodeDecodeError):
        return None


def _new_name() -> str:
    return f"{time.time_ns():020d}-{os.getpid()}-{os.urandom(4).hex()}"


def publish(tmp_path: str, queue_dir: str | os.PathLike[str]) -> str:
    """Rename a finished batch file into the spool (the atomic step) and fsync the folder."""
    d = spool_dir(queue_dir)
    final = os.path.join(d, _new_name() + BATCH_SUFFIX)
    fileio.ops.rename(tmp_path, final)
    fileio.ops.fsync_dir(d)
    return final


def new_temp_path(queue_dir: str | os.PathLike[str], sub: str = "") -> str:
    """A fresh temporary file name inside the spool (a dot name: never taken for a batch)."""
    d = os.path.join(spool_dir(queue_dir), sub) if sub else spool_dir(queue_dir)
    fileio.make_dirs(d, 0o700)  # fsynced into its parent: a durable batch needs a durable spool/
    return os.path.join(d, "." + _new_name() + ".tmp")


def spool_put(
    path: str | os.PathLike[str],
    records: Iterable[bytes | bytearray | memoryview],
    *,
    key: str,
    expire_at: float | _dt.datetime | None = None,
) -> bool:
    """Deliver ``records`` as one batch to the queue at ``path``, whoever holds it open.

    The batch becomes visible to the owner atomically and is adopted exactly once, in arrival
    order.  ``key`` names the batch: a batch whose key was already adopted is dropped (here,
    returning ``False``, when the ledger already lists it; otherwise at adoption).  ``expire_at``
    (epoch seconds or a datetime) applies to every record, as for ``JournaledQueue.put``: a time
    at or before now stores the records already expired; a bad value raises ``ValueError`` or
    ``TypeError`` before anything is written.  Returns ``True`` once the batch is durably spooled.
    """
    if not isinstance(key, str) or not key:
        raise ValueError("key must be a non-empty string")
    expire = expire_ms(expire_at, None, 0)
    qdir = os.fspath(path)
    if Ledger(spool_dir(qdir)).adopted(key):
        return False
    tmp = new_temp_path(qdir)
    writer = BatchWriter(tmp, key)
    try:
        for rec in records:
            if not isinstance(rec, (bytes, bytearray, memoryview)):
                raise TypeError(f"records must be bytes, not {type(rec).__name__}")
            writer.add(rec, expire)
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    publish(tmp, qdir)
    return True


def pending_batches(queue_dir: str | os.PathLike[str]) -> list[str]:
    """Entries named like batch files, in arrival order (by name only: :func:`read_batch`
    decides by content whether one is a batch of ours)."""
    d = spool_dir(queue_dir)
    try:
        names = [n for n in os.listdir(d) if n.endswith(BATCH_SUFFIX) and not n.startswith(".")]
    except FileNotFoundError:
        return []
    return [os.path.join(d, n) for n in sorted(names)]


# ------------------------------------------------------------------------------ the ledger
def _hex(key: str) -> bytes:
    return key.encode("utf-8").hex().encode("ascii")


def _in_sorted_block(block: bytes, needle: bytes) -> bool:
    """Whether ``needle`` is one of the sorted ``\n``-terminated lines of ``block``: a binary
    search over byte offsets, so a look-up costs O(log n) steps whatever the ledger's size."""
    lo, hi = 0, len(block)  # both always a line start (or the end)
    while lo < hi:
        mid = (lo + hi) // 2
        nl = block.rfind(b"\n", lo, mid)
        start = lo if nl < 0 else nl + 1
        end = block.index(b"\n", start)
        line = block[start:end]
        if line == needle:
            return True
        if line < needle:
            lo = end + 1
        else:
            hi = start
    return False


def _line(body: str) -> bytes:
    raw = body.encode("ascii")
    return raw + b" %08x\n" % crc32c(raw)


class Ledger:
    """The record of intents (``P``) and completed adoptions (``D``), appended line by line
    after an optional compacted block of adopted keys (``K``; docs/format.md).

    Only the queue's owner writes it; anyone may read it (``spool_put`` asks :meth:`adopted`).
    Every adopted key is remembered for good; :meth:`compact` folds the lines into the block so
    that reading the ledger parses at most :data:`LEDGER_TAIL_LIMIT` lines one by one.
    """

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LEDGER)
        self.directory = directory
        self.done: set[str] = set()  # adopted keys from the lines after the block
        self.pending: dict[str, tuple[int, int, int]] = {}  # key -> (first, count, skip)
        self.tail_lines = 0  # lines after the block
        self._block = b""  # one "<hex key>\n" per adopted key, sorted (a binary search finds one)
        # where a torn last line starts (a crash during its append), cut before the next append:
        # a line written after it would be glued to it and fail its CRC
        self._torn_at: int | None = None
        self._load()

    def _load(self) -> None:
        try:
            raw = _read_regular(self.path)
        except FileNotFoundError:
            return
        except NotABatch:
            raise UnsafeDirectory(
                errno.ELOOP,
                "spool ledger is not a regular file (a symbolic link?); not following it",
                self.path,
            ) from None
        if raw and not raw.endswith(b"\n"):
            self._torn_at = raw.rfind(b"\n") + 1
        pos = 0
        if raw.startswith(b"K "):
            pos = self._load_block(raw)
        lines = raw[pos:].split(b"\n")
        for n, line in enumerate(lines):
            if not line:
                continue
            self.tail_lines += 1
            body, _, crc = line.rpartition(b" ")
            try:
                ok = int(crc, 16) == crc32c(body)
                parts = body.decode("ascii").split(" ")
                key = bytes.fromhex(parts[1]).decode("utf-8")
            except (ValueError, IndexError, UnicodeDecodeError):
                ok = False
            if not ok:
                if n < len(lines) - 1 and any(lines[n + 1 :]):
                    log.error("spool ledger %s: damaged line %d ignored", self.path, n + 1)
                continue  # a torn last line: its fsync never returned, so nothing followed it
            if parts[0] == "P":
                self.pending[key] = (int(parts[2]), int(parts[3]), int(parts[4]))
            elif parts[0] == "D":
                self.pending.pop(key, None)
                self.done.add(key)

    def _load_block(self, raw: bytes) -> int:
        """Read the ``K <count> <length> <block crc>`` header and its block; the offset after it."""
        end = raw.find(b"\n")
        body, _, crc = raw[: max(end, 0)].rpartition(b" ")
        try:
            _, _count, length, block_crc = body.decode("ascii").split(" ")  # count: for people
            if int(crc, 16) != crc32c(body):
                raise ValueError("header CRC mismatch")
            start, stop = end + 1, end + 1 + int(length)
            block = raw[start:stop]
            if len(block) != int(length) or crc32c(block) != int(block_crc, 16):
                raise ValueError("key block CRC mismatch")
        except ValueError as exc:
            # the rename that wrote it was atomic, so this is damage after the fact: say so loudly
            log.error(
                "spool ledger %s: compacted key block damaged (%s); its keys are forgotten", self.path, exc
            )
            # skip the block's lines (bare hex, no space) to the lines appended after it
            pos = len(raw) if end < 0 else end + 1
            while pos < len(raw):
                nl = raw.find(b"\n", pos)
                nl = len(raw) if nl < 0 else nl
                if b" " in raw[pos:nl]:
                    break
                pos = nl + 1
            return pos
        self._block = block
        return stop

    def adopted(self, key: str) -> bool:
        """Whether a batch with this key was adopted (ever, as far as this ledger knows)."""
        return key in self.done or _in_sorted_block(self._block, _hex(key))

    def adopted_keys(self) -> set[str]:
        """Every adopted key (builds the set: :meth:`adopted` is the cheap question)."""
        block = {bytes.fromhex(h.decode("ascii")).decode("utf-8") for h in self._block.split(b"\n") if h}
        return block | self.done

    def _append(self, text: str) -> None:
        line = _line(text)
        created = not os.path.lexists(self.path)
        fd = fileio.ops.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o600)
        try:
            if self._torn_at is not None:
                fileio.ops.ftruncate(fd, self._torn_at)  # never acknowledged: its fsync never returned
            fileio.ops.write(fd, line)
            fileio.ops.fsync(fd)
        finally:
            fileio.ops.close(fd)
        self._torn_at = None
        self.tail_lines += 1
        if created:
            fileio.ops.fsync_dir(self.directory)

    def intend(self, key: str, first: int, count: int, skip: int) -> None:
        self._append(f"P {key.encode('utf-8').hex()} {first} {count} {skip}")
        self.pending[key] = (first, count, skip)

    def complete(self, key: str) -> None:
        self._append(f"D {key.encode('utf-8').hex()}")
        self.pending.pop(key, None)
        self.done.add(key)

    def compact_if_long(self) -> None:
        """:meth:`compact` once more than :data:`LEDGER_TAIL_LIMIT` lines follow the block."""
        if self.tail_lines > LEDGER_TAIL_LIMIT:
            self.compact()

    def compact(self) -> None:
        """Rewrite the ledger as one key block (every adopted key) plus the open intents, atomically:
        a fresh temp file (never through a symlink), fsync, rename over, fsync of the folder."""
        lines = set(self._block.split(b"\n")[:-1])
        lines.update(_hex(k) for k in self.done)
        block = b"".join(h + b"\n" for h in sorted(lines))
        count = len(lines)
        head = _line(f"K {count} {len(block)} {crc32c(block):08x}")
        intents = b"".join(
            _line(f"P {k.encode('utf-8').hex()} {f} {c} {s}") for k, (f, c, s) in self.pending.items()
        )
        tmp = os.path.join(self.directory, f".{LEDGER}.{os.urandom(6).hex()}.tmp")
        fd = fileio.ops.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        try:
            try:
                fileio.ops.write(fd, head + block + intents)
                fileio.ops.fsync(fd)
            finally:
                fileio.ops.close(fd)
            fileio.ops.rename(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                fileio.ops.unlink(tmp)  # our own fresh temp file; the old ledger is intact
            raise
        fileio.ops.fsync_dir(self.directory)
        self._block = block
        self.done = set()
        self.tail_lines = len(self.pending)
        self._torn_at = None
