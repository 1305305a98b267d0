"""The spool's ledger, ``spool/ledger``: which batches the owner adopted (docs/format.md section 12).

The owner records its intent to adopt a batch (``P``: key, first id, count, items skipped) before
the items are appended and its completion (``D``) after, each line with its CRC32C and fsynced;
every adopted key is remembered for good, folded now and then into a sorted key block (``K``) so
that a look-up is a binary search.  Anyone may read it: ``spool_put`` asks whether a key was
adopted before it writes a batch.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os

from crc32c import crc32c

from journaled.disk import fileio
from journaled.errors import UnsafeDirectory

log = logging.getLogger("journaled")

LEDGER = "ledger"
#: The owner rewrites the ledger as one compacted key block once more lines than this follow it,
#: so a reader of the ledger (``spool_put``) parses at most this many lines one by one.
LEDGER_TAIL_LIMIT = 128

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


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
            raw = fileio.ops.read_file(self.path)  # never through a link, never blocking on a FIFO
        except FileNotFoundError:
            return
        except (fileio.NotRegularFile, IsADirectoryError):
            raise UnsafeDirectory(
                errno.ELOOP, "spool ledger is not a regular file; not reading it", self.path
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
