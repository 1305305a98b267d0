"""The spool's files: batch files and the adoption ledger, byte for byte (docs/format.md).

How another process hands items to a queue it does not own: :func:`spool_put` (or Spark's
executors through :class:`BatchWriter` and :func:`publish`) writes a complete batch file (records,
then a trailer with the count and a CRC32C of everything before it) under a temporary name,
fsyncs it and renames it into ``<queue dir>/spool/``.  A batch is therefore either absent or
whole.  The owner adopts it (spool.py) and records that in the :class:`Ledger`.
"""


from __future__ import annotations

import logging
import os
import struct
import time
from collections.abc import Iterable
from typing import BinaryIO

from crc32c import crc32c

from journaled import fileio
from journaled.errors import CorruptJournal

log = logging.getLogger("journaled")

SPOOL_DIR = "spool"
LEDGER = "ledger"
REJECTED = "rejected"
STAGING = "staging"
BATCH_SUFFIX = ".batch"

_MAGIC = b"\x89JSPL\r\n\x1a"
_VERSION = 1
_HEAD = struct.Struct("<8sHH")  # magic, version, key length
_REC = struct.Struct("<IQ")  # payload length, expire ms (0 = never)
_END = 0xFFFFFFFF  # a record length of all ones opens the trailer
_TRAILER = struct.Struct("<IQI")  # _END, record count, CRC32C of every byte before the CRC
MAX_KEY_BYTES = 1024
MAX_PAYLOAD = (1 << 31) - 1

def spool_dir(queue_dir: str | os.PathLike[str]) -> str:
    """The spool folder of a queue directory."""
    return os.path.join(os.fspath(queue_dir), SPOOL_DIR)


# ------------------------------------------------------------------------------ batch files
class BatchWriter:
    """Write one batch file incrementally (used by :func:`spool_put` and by Spark executors).

    ``finish()`` writes the trailer and fsyncs; the caller then renames the file into place.
    """

    def __init__(self, path: str, key: str) -> None:
        raw_key = key.encode("utf-8")
        if len(raw_key) > MAX_KEY_BYTES:
            raise ValueError(f"batch key longer than {MAX_KEY_BYTES} bytes")
        self.path = path
        self.count = 0
        self._crc = 0
        self._f: BinaryIO = open(path, "xb")  # noqa: SIM115 - closed in finish/discard
        self._emit(_HEAD.pack(_MAGIC, _VERSION, len(raw_key)) + raw_key)

    def _emit(self, data: bytes) -> None:
        self._crc = crc32c(data, self._crc)
        self._f.write(data)

    def add(self, payload: bytes | bytearray | memoryview, expire_ms: int = 0) -> None:
        payload = bytes(payload)
        if len(payload) > MAX_PAYLOAD:
            raise ValueError("payload too large for a spool batch")
        self._emit(_REC.pack(len(payload), expire_ms) + payload)
        self.count += 1

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


def read_batch(path: str) -> tuple[str, list[tuple[bytes, int]]]:
    """``(key, [(payload, expire_ms), ...])`` of a batch file; :class:`CorruptJournal` if it is
    not a complete, valid batch."""
    data = fileio.ops.read_file(path)
    if len(data) < _HEAD.size + _TRAILER.size or data[:8] != _MAGIC:
        raise CorruptJournal(path, 0, "not a spool batch file")
    _, version, klen = _HEAD.unpack_from(data)
    if version != _VERSION:
        raise CorruptJournal(path, 8, f"spool batch version {version} is not supported")
    (crc,) = struct.unpack_from("<I", data, len(data) - 4)
    if crc32c(memoryview(data)[:-4]) != crc:
        raise CorruptJournal(path, len(data) - 4, "spool batch CRC mismatch")
    pos = _HEAD.size + klen
    out: list[tuple[bytes, int]] = []
    try:
        key = data[_HEAD.size : pos].decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptJournal(path, _HEAD.size, "batch key is not UTF-8") from None
    while True:
        if pos + 4 > len(data):
            raise CorruptJournal(path, pos, "spool batch truncated")
        length, expire_ms = _REC.unpack_from(data, pos) if pos + _REC.size <= len(data) else (_END, 0)
        if length == _END:
            _, count, _ = _TRAILER.unpack_from(data, pos)
            if count != len(out) or pos + _TRAILER.size != len(data):
                raise CorruptJournal(path, pos, "spool batch trailer does not match its records")
            return key, out
        start = pos + _REC.size
        if start + length > len(data):
            raise CorruptJournal(path, pos, "spool batch record overruns the file")
        out.append((data[start : start + length], expire_ms))
        pos = start + length


def read_batch_key(path: str) -> str | None:
    """Just the key of a batch file (``None`` if unreadable)."""
    try:
        with open(path, "rb") as f:
            head = f.read(_HEAD.size + MAX_KEY_BYTES)
        magic, _, klen = _HEAD.unpack_from(head)
        return head[_HEAD.size : _HEAD.size + klen].decode("utf-8") if magic == _MAGIC else None
    except (OSError, struct.error, UnicodeDecodeError):
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
    os.makedirs(d, mode=0o700, exist_ok=True)
    return os.path.join(d, "." + _new_name() + ".tmp")


def spool_put(
    path: str | os.PathLike[str],
    records: Iterable[bytes | bytearray | memoryview],
    *,
    key: str,
    expire_at: float | None = None,
) -> bool:
    """Deliver ``records`` as one batch to the queue at ``path``, whoever holds it open.

    The batch becomes visible to the owner atomically and is adopted exactly once, in arrival
    order.  ``key`` names the batch: a batch whose key was already adopted is dropped (here,
    returning ``False``, when the ledger already lists it; otherwise at adoption).  ``expire_at``
    (epoch seconds) applies to every record.  Returns ``True`` once the batch is durably spooled.
    """
    if not isinstance(key, str) or not key:
        raise ValueError("key must be a non-empty string")
    qdir = os.fspath(path)
    if key in Ledger(spool_dir(qdir)).adopted_keys():
        return False
    expire_ms = int(expire_at * 1000) if expire_at is not None else 0
    tmp = new_temp_path(qdir)
    writer = BatchWriter(tmp, key)
    try:
        for rec in records:
            if not isinstance(rec, (bytes, bytearray, memoryview)):
                raise TypeError(f"records must be bytes, not {type(rec).__name__}")
            writer.add(rec, expire_ms)
        writer.finish()
    except BaseException:
        writer.discard()
        raise
    publish(tmp, qdir)
    return True


def pending_batches(queue_dir: str | os.PathLike[str]) -> list[str]:
    """Batch files waiting for adoption, in arrival order."""
    d = spool_dir(queue_dir)
    try:
        names = [n for n in os.listdir(d) if n.endswith(BATCH_SUFFIX) and not n.startswith(".")]
    except FileNotFoundError:
        return []
    return [os.path.join(d, n) for n in sorted(names)]


# ------------------------------------------------------------------------------ the ledger
class Ledger:
    """The append-only record of intents (``P``) and completed adoptions (``D``)."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, LEDGER)
        self.done: set[str] = set()
        self.pending: dict[str, tuple[int, int, int]] = {}  # key -> (first, count, skip)
        self._load()

    def _load(self) -> None:
        try:
            raw = fileio.ops.read_file(self.path)
        except FileNotFoundError:
            return
        lines = raw.split(b"\n")
        for n, line in enumerate(lines):
            if not line:
                continue
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

    def adopted_keys(self) -> set[str]:
        return self.done

    def _append(self, text: str) -> None:
        body = text.encode("ascii")
        line = body + b" %08x\n" % crc32c(body)
        created = not os.path.exists(self.path)
        fd = fileio.ops.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            fileio.ops.write(fd, line)
            fileio.ops.fsync(fd)
        finally:
            fileio.ops.close(fd)
        if created:
            fileio.ops.fsync_dir(os.path.dirname(self.path))

    def intend(self, key: str, first: int, count: int, skip: int) -> None:
        self._append(f"P {key.encode('utf-8').hex()} {first} {count} {skip}")
        self.pending[key] = (first, count, skip)

    def complete(self, key: str) -> None:
        self._append(f"D {key.encode('utf-8').hex()}")
        self.pending.pop(key, None)
        self.done.add(key)


