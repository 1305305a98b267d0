"""Adopting spool batches: exactly once, in arrival order, into the queue that owns the directory.

Producers in other processes write batch files into ``<queue dir>/spool/`` (disk/spoolfiles.py).  The
queue's owner (or the next process to open the queue) *adopts* each batch exactly once, in
arrival order (the name starts with the producer's nanosecond clock at rename time), giving its
items ids like any put, through the queue's one append path (same policies, counters and
durability as ``put_many``).  The key a producer chose is remembered in the ledger (for good;
compacted now and then), so a re-sent batch (same key) is dropped, across restarts too.  An entry
that is not a batch of ours by content (a directory, a symlink, other bytes) is left as it is.

Exactly-once adoption, even under kill -9 at any point, rests on one intent line written
*before* the items are appended, while the queue's append lock is held::

    P <key> <first id> <count> <skip>     fsynced; then the items get ids first..first+n-1
    ... journal synced ...
    D <key>                               fsynced; then the batch file is unlinked

Because nothing else can append between the intent and our append, after a crash the journal's
recovered ``next_id`` says exactly how many of the batch's items landed (ids are consecutive and
a torn journal tail can only lose a suffix).  Recovery appends only the missing rest, so no item
is lost and none is adopted twice.  That arithmetic is only sound right after opening: if
anything fails between an intent and its ``D`` line (the append, or the fsync that makes it
durable), adoption stops until the queue is reopened, and the batch stays pending.
docs/spark.md ("The spool") has the argument in full.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Protocol

from journaled.config import QueueConfig
from journaled.disk import fileio, intents
from journaled.disk.spoolfiles import (
    BATCH_SUFFIX,
    REJECTED,
    SPOOL_DIR,
    STAGING,
    BatchWriter,
    new_temp_path,
    pending_batches,
    publish,
    read_batch,
    read_batch_key,
    spool_dir,
    spool_put,
)
from journaled.disk.spoolledger import LEDGER, LEDGER_TAIL_LIMIT, Ledger
from journaled.errors import CorruptJournal, Full
from journaled.format.metadata import Meta, encoded_size
from journaled.format.spoolbatch import MAX_KEY_BYTES, BatchRecord, NotABatch

log = logging.getLogger("journaled")

#: ``(payloads, expire_ms)`` or ``(payloads, expire_ms, metas)``: items appended with one expiry
#: (0 = never) and, in the second form, each item's metadata (None for a plain PUT).
PutGroup = tuple[Sequence[bytes], int] | tuple[Sequence[bytes], int, Sequence[Meta | None]]

__all__ = [
    "BATCH_SUFFIX",
    "LEDGER",
    "LEDGER_TAIL_LIMIT",
    "MAX_KEY_BYTES",
    "REJECTED",
    "SPOOL_DIR",
    "STAGING",
    "Adopter",
    "BatchRecord",
    "BatchWriter",
    "Ledger",
    "NotABatch",
    "SpoolHost",
    "new_temp_path",
    "pending_batches",
    "publish",
    "read_batch",
    "read_batch_key",
    "spool_dir",
    "spool_put",
]

#: Test hook: the crash tests set this in a child process to die (SIGKILL) at a named step,
#: ``"step"`` or ``"step#k"`` for its k-th occurrence (1-based).
_crash_at: str | None = None
_seen: dict[str, int] = {}


def _step(name: str) -> None:
    if _crash_at is None:
        return
    _seen[name] = n = _seen.get(name, 0) + 1
    if _crash_at in (name, f"{name}#{n}"):
        os.kill(os.getpid(), signal.SIGKILL)


# ------------------------------------------------------------------------------ adoption
class DurableLog(Protocol):
    """The journal as the spool sees it."""

    @property
    def next_id(self) -> int: ...

    def wait_durable(self, seq: int) -> None: ...

    def sync(self) -> None: ...

    def reserve(self, sizes: Sequence[int]) -> None: ...


class SpoolHost(Protocol):
    """What the adopter needs from the queue that owns the directory."""

    @property
    def max_item_size(self) -> int: ...

    @property
    def next_id(self) -> int:
        """The id the next append gets (read only while no append can run: at open)."""
        ...

    def append_runs(self, runs: Sequence[PutGroup], intent: Callable[[int], None]) -> int:
        """Append runs (see :data:`PutGroup`) through the queue's one append path, calling
        ``intent(first_id)`` under the append lock just before anything is appended (after the
        policies have accepted the batch).  Returns the first id."""
        ...

    def reserve(self, runs: Sequence[PutGroup]) -> None:
        """Create every journal file appending ``runs`` will rotate into, so that once the intent
        line is written the append cannot fail on an ``open`` (which would leave the intent
        counting other items as this batch's).  Call under the append lock, in ``intent``."""
        ...

    def sync(self) -> None: ...


def _runs(records: Sequence[BatchRecord]) -> Iterator[PutGroup]:
    """Consecutive records sharing an expiry, as one append each (with their metadata when
    any of them has some)."""
    i = 0
    while i < len(records):
        exp = records[i][1]
        j = i
        while j < len(records) and records[j][1] == exp:
            j += 1
        run = records[i:j]
        payloads = [p for p, _, _ in run]
        metas = [m for _, _, m in run]
        if any(m is not None for m in metas):
            yield payloads, exp, metas
        else:
            yield payloads, exp
        i = j


def _sizes(runs: Sequence[PutGroup]) -> list[int]:
    """What each item of ``runs`` adds to a PUT's fixed size: its payload and metadata."""
    out: list[int] = []
    for run in runs:
        if len(run) > 2:
            out += [len(p) + (0 if m is None else encoded_size(m)) for p, m in zip(run[0], run[2])]
        else:
            out += [len(p) for p in run[0]]
    return out


class Adopter:
    """Adopts spooled batches into the queue that owns the directory (one per open queue)."""

    def __init__(self, queue_dir: str) -> None:
        self.queue_dir = queue_dir
        self.dir = spool_dir(queue_dir)
        self._lock = threading.Lock()  # one adoption pass at a time
        self.ledger: Ledger | None = None
        # Set when an append failed after its intent line: the recovery arithmetic is only
        # sound right after opening, so adoption waits for the queue to be reopened.
        self.broken = False
        self._held_back: set[str] = set()  # batches refused by a full reader (logged once)
        # Entries with a batch name that are not batches of ours (directories, symlinks, other
        # content): left exactly as they are, said once, never read again this session.
        self.foreign: set[str] = set()

    def _ledger(self) -> Ledger:
        if self.ledger is None:
            self.ledger = Ledger(self.dir)
            self._compact(self.ledger)
        return self.ledger

    def _compact(self, ledger: Ledger) -> None:
        try:
            ledger.compact_if_long()
        except OSError as exc:  # the old ledger is intact: only reading it stays slower
            log.warning("spool ledger %s not compacted: %s", ledger.path, exc)

    def _batches(self) -> list[str]:
        return [p for p in pending_batches(self.queue_dir) if p not in self.foreign]

    def has_work(self) -> bool:
        if self.broken:
            return False
        if self._batches() or (self.ledger is not None and self.ledger.pending):
            return True
        return bool(intents.orphaned_intents(self.queue_dir, intents.ORPHAN_AGE))

    def _finish_orphans(self) -> None:
        """Finish the publications whose publisher died between its renames (their intent is
        still on disk after :data:`intents.ORPHAN_AGE`): the intent was the commit point, so
        the batch is delivered whole, never in part."""
        for intent in intents.orphaned_intents(self.queue_dir, intents.ORPHAN_AGE):
            try:
                n = intents.finish_intent(intent, self.queue_dir)
            except OSError as exc:
                log.warning("spool: could not finish the publication %s: %s", intent, exc)
                continue
            log.warning(
                "spool: finished a publication its publisher left half done (%s, %d file(s))", intent, n
            )

    def adopt(self, host: SpoolHost) -> int:
        """Finish interrupted adoptions, then adopt every waiting batch; return items added."""
        if self.broken or not os.path.isdir(self.dir):
            return 0
        with self._lock:
            try:
                ledger = self._ledger()
            except OSError as exc:
                # without its ledger adoption cannot be exactly once: batches wait, and the
                # queue itself stays usable
                log.error("spool adoption off until reopen: ledger unreadable (%s)", exc)
                self.broken = True
                return 0
            self._finish_orphans()
            added = self._adopt_all(host, ledger)
            self._compact(ledger)
            return added

    def _adopt_all(self, host: SpoolHost, ledger: Ledger) -> int:
        added = 0
        batches = self._batches()
        if ledger.pending:
            by_key = {read_batch_key(p): p for p in batches}
            for key in list(ledger.pending):
                added += self._finish(host, ledger, key, by_key.get(key))
            batches = self._batches()
        for path in batches:
            try:
                added += self._adopt_one(host, ledger, path)
            except Full as exc:
                # a reader is full: this batch (and, to keep arrival order, every later
                # one) waits for a later pass; said once per batch, not every pass
                if path not in self._held_back:
                    self._held_back.add(path)
                    log.warning("spool batch %s waits: %s", path, exc)
                break
            self._held_back.discard(path)
        return added

    def _load(self, path: str) -> tuple[str, list[BatchRecord]] | None:
        try:
            key, records = read_batch(path)
        except FileNotFoundError:
            return None
        except NotABatch as exc:
            self._leave(path, str(exc))
            return None
        except CorruptJournal as exc:
            self._reject(path, str(exc))
            return None
        return key, records

    def _leave(self, path: str, why: str) -> None:
        self.foreign.add(path)
        log.warning("spool entry %s is not a batch of ours (%s); left as it is", path, why)

    def _reject(self, path: str, why: str) -> None:
        d = os.path.join(self.dir, REJECTED)
        try:
            if not os.path.islink(d):
                fileio.make_dirs(d, 0o700)
        except OSError:
            pass  # a file or a dangling link in its place: said just below
        if os.path.islink(d) or not os.path.isdir(d):
            # moving it through a link would take our file out of the queue directory
            self._leave(path, f"{why}; and {d} is not a real folder to set it aside in")
            return
        log.error("spool batch %s rejected (%s); moved to %s", path, why, d)
        fileio.ops.rename(path, os.path.join(d, os.path.basename(path)))
        fileio.ops.fsync_dir(self.dir)

    def _drop(self, path: str) -> None:
        try:
            fileio.ops.unlink(path)
        except FileNotFoundError:
            return
        fileio.ops.fsync_dir(self.dir)

    def _adopt_one(self, host: SpoolHost, ledger: Ledger, path: str) -> int:
        loaded = self._load(path)
        if loaded is None:
            return 0
        key, records = loaded
        _step("after-read")
        if ledger.adopted(key):
            log.info("spool batch %s (key %r) was adopted before; dropped", path, key)
            self._drop(path)
            return 0
        too_big = [len(p) for p, _, _ in records if len(p) > host.max_item_size]
        if too_big:
            self._reject(path, f"item of {max(too_big)} bytes exceeds max_item_size")
            return 0
        return self._append(host, ledger, path, key, records, len(records), 0)

    def _append(
        self,
        host: SpoolHost,
        ledger: Ledger,
        path: str,
        key: str,
        records: list[BatchRecord],
        count: int,
        skip: int,
    ) -> int:
        rest = records[skip:]
        if rest:
            intended = False

            runs = list(_runs(rest))

            def intent(first: int) -> None:
                nonlocal intended
                # A failure from here to the D line stops adoption until reopen, and recovery
                # then counts every id from `first` on as this batch's: nothing else may fail
                # without poisoning the journal, so the files to rotate into are created first.
                host.reserve(runs)
                ledger.intend(key, first, count, skip)
                intended = True
                _step("after-intent")

            try:
                host.append_runs(runs, intent)
                _step("after-append")
                host.sync()
                _step("after-sync")
            except BaseException:
                # Refused before the intent (a full reader): nothing changed, try again later.
                # After it, the batch stays pending until the queue is reopened, when recovery
                # counts what is durably in the journal.
                if intended:
                    self.broken = True
                raise
        ledger.complete(key)
        _step("after-done")
        self._drop(path)
        _step("after-unlink")
        return len(rest)

    def _finish(self, host: SpoolHost, ledger: Ledger, key: str, path: str | None) -> int:
        first, count, skip = ledger.pending[key]
        next_id = host.next_id
        landed = min(max(next_id - first, 0), count - skip)
        if path is None:
            if landed < count - skip:
                log.error("spool batch %r vanished before it was adopted in full", key)
            ledger.complete(key)
            return 0
        loaded = self._load(path)
        if loaded is None:
            ledger.complete(key)
            return 0
        _, records = loaded
        if landed:
            log.warning("spool batch %r: %d of %d items had landed before a crash", key, landed, count)
        return self._append(host, ledger, path, key, records, count, skip + landed)


class QueueAppender:
    """:class:`SpoolHost` over a queue's append path: its lock, its locked append function
    (``append_locked(runs, count, nbytes, add_ms, intent) -> (first id, sequence)``), its journal
    (``next_id``, ``wait_durable``, ``sync``) and its config."""

    def __init__(
        self,
        lock: threading.Lock,
        append_locked: Callable[..., tuple[int, int]],
        journal: DurableLog,
        config: QueueConfig,
    ) -> None:
        self._lock = lock
        self._append_locked = append_locked
        self._journal = journal
        self._config = config

    @property
    def max_item_size(self) -> int:
        return self._config.max_item_size

    @property
    def next_id(self) -> int:
        return self._journal.next_id

    def append_runs(self, runs: Sequence[PutGroup], intent: Callable[[int], None]) -> int:
        count = sum(len(run[0]) for run in runs)
        nbytes = sum(len(x) for run in runs for x in run[0])
        with self._lock:
            first_id, seq = self._append_locked(runs, count, nbytes, time.time_ns() // 1_000_000, intent)
        if self._config.sync == "always":
            self._journal.wait_durable(seq)
        return first_id

    def sync(self) -> None:
        self._journal.sync()

    def reserve(self, runs: Sequence[PutGroup]) -> None:
        self._journal.reserve(_sizes(runs))
