"""The spool's batch files: written, published, listed and read (docs/format.md section 12).

How another process hands items to a queue it does not own: :func:`spool_put` (or Spark's
executors through :class:`BatchWriter` and :func:`publish`) writes a complete batch file (records,
then a trailer with the count and a CRC32C of everything before it) under a temporary name,
fsyncs it and renames it into ``<queue dir>/spool/``.  A batch is therefore either absent or
whole.  The owner adopts it (owner/adoption.py) and records that in the ledger
(disk/spoolledger.py).  The bytes of a batch are format/spoolbatch.py's.
"""

from __future__ import annotations

import datetime as _dt
import logging
import os
import stat
import struct
import time
from collections.abc import Iterable
from typing import BinaryIO

from crc32c import crc32c

from journaled.disk import fileio
from journaled.disk.spoolledger import Ledger
from journaled.format import spoolbatch
from journaled.format.metadata import Meta
from journaled.format.spoolbatch import BatchRecord, NotABatch
from journaled.item import expire_ms

log = logging.getLogger("journaled")

SPOOL_DIR = "spool"
REJECTED = "rejected"
STAGING = "staging"
BATCH_SUFFIX = ".batch"

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def read_regular(path: str, limit: int = -1) -> bytes:
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
        first = spoolbatch.head(key.encode("utf-8"), with_meta)  # ValueError: nothing created
        self.path = path
        self.count = 0
        self.with_meta = with_meta
        self._crc = 0
        # O_EXCL and O_NOFOLLOW: a name planted in our place (a symlink) fails, never written through
        fd = fileio.ops.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
        self._f: BinaryIO = os.fdopen(fd, "wb")  # noqa: SIM115 - closed in finish/discard
        self._emit(first)

    def _emit(self, data: bytes | bytearray | memoryview) -> None:
        self._crc = crc32c(data, self._crc)
        self._f.write(data)

    def add(
        self, payload: bytes | bytearray | memoryview, expire_ms: int = 0, meta: Meta | None = None
    ) -> None:
        """Append one record; ``meta`` (a version 2 batch only) within the limits of a put
        (format/metadata.py), else ``ValueError`` and nothing written."""
        payload = bytes(payload)
        if not self.with_meta:
            if meta is not None and not meta.empty:
                raise ValueError("item metadata needs a batch written with_meta=True")
            self._emit(spoolbatch.plain_record(payload, expire_ms))
        else:
            self._emit(spoolbatch.meta_record(payload, expire_ms, meta))
        self.count += 1

    def add_framed(self, records: bytes | bytearray | memoryview, count: int) -> None:
        """Append ``count`` version 1 records already framed as ``length u32 | expire_ms u64 |
        payload`` (heads from :func:`~journaled.format.spoolbatch.record_heads`): one write and
        one CRC update for the lot, for a caller that holds its payloads as one column.  The
        framing is the caller's word; a reader still checks it, with the CRC, before adopting
        the batch."""
        if self.with_meta:
            raise ValueError("framed records are version 1 records: this batch is written with_meta")
        if count < 0:
            raise ValueError("count must not be negative")
        self._emit(records)
        self.count += count

    def finish(self) -> None:
        self._emit(spoolbatch.trailer_start(self.count))
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


def read_batch(path: str) -> tuple[str, list[BatchRecord]]:
    """``(key, [(payload, expire_ms, meta), ...])`` of a batch file (``meta`` None for a plain
    item, always so in a version 1 batch).  :class:`NotABatch` if the entry is not one of ours
    at all (not a regular file, or without the batch magic); :class:`CorruptJournal` if it is
    ours but not complete and valid (metadata that does not parse or is beyond a put's limits
    included)."""
    return spoolbatch.parse(path, read_regular(path))


def read_batch_key(path: str) -> str | None:
    """Just the key of a batch file (``None`` if unreadable or not a batch of ours)."""
    try:
        return spoolbatch.key_of(read_regular(path, spoolbatch.HEAD.size + spoolbatch.MAX_KEY_BYTES))
    except (OSError, NotABatch):
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
