"""What an owner remembers of recent puts so that a put is not stored twice: the keys of the
de-duplication window (``QueueConfig.dedup_window``) and each producer's recent tagged runs.

Both live in memory, rebuilt from the journal's tail (:func:`rebuild`): the records are the truth
for every id the journal holds.  The keys are read back at open (only by an owner opening with a
window); the producers' runs at the first tagged put after the open, under the queue lock, so an
owner that never gets one (no client tags its puts) reads nothing more than before at open.

Journal files are archived as soon as every reader has passed them, usually long before a key's
window ends; their keys must outlive them.  So before any journal file is archived the owner
writes its whole window to ``<queue>.dedup`` (:func:`save_index`, disk/dedupindex.py), and
:func:`rebuild` takes from that file the keys whose ids lie below the journal's first id: nothing
archived is ever the only record of a key within the window.  (Holding archiving back for the
window instead would keep up to a window's worth of journal on disk: gigabytes for an hour of a
busy queue.)  docs/design.md, "Keys and de-duplication", has the measured cost.

**What they cost.**  :class:`KeyWindow` holds, per key put within the window, the key's bytes
object, one dict entry and the id (an int), plus 8 bytes of add time in an array and a pointer in
a deque that keep the add order.  scripts/bench_dedup.py measured 139 bytes of Python objects per
16-byte key (133 MiB at 1M keys, the keys included; the process grew by 302 MiB, the dict's
resizing leaving freed memory with the allocator).  Entries older than the window are dropped as
puts come (the add order is the insertion order, since add times never decrease), so memory is
bounded by the number of keys put within one window.  Opening reads every record of the window
back (payloads included; about 4 µs per keyed record, half of it the recovery scan any open does:
PUTX records are decoded by the Python reference).

:class:`Producers` keeps per producer at most :data:`MAX_RUNS` runs ``(first sequence, first id,
count)`` of tagged puts; a producer silent for longer than :data:`PRODUCER_WINDOW` seconds is
forgotten.  A client retries a put in flight for at most 60 s, so 120 s of journal tail holds
every put a retry can meet (reading it back: about 0.3 s per million plain records, measured with
1M puts of 100 B, more for PUTX records, which the Python reference decodes).
"""

from __future__ import annotations

import array
import collections
import os
import threading
from collections.abc import Sequence

from journaled.disk import dedupindex
from journaled.format.record import PutX
from journaled.log.journal import Journal
from journaled.log.state import Cursor

#: Seconds of tagged puts an owner remembers, and reads back from the journal at open.  The
#: client gives up retrying a put 60 s after it first sent it; twice that leaves room for clocks.
PRODUCER_WINDOW = 120.0
#: Runs remembered per producer (a run per tagged put whose ids and sequences do not continue
#: the last run).  A retry concerns the last puts of a producer, never one this far back.
MAX_RUNS = 256


class KeyWindow:
    """The keys put within the last ``window`` seconds, each with the id of its first put."""

    def __init__(self, window: float) -> None:
        self.window_ms = int(window * 1000)
        self.ids: dict[bytes, int] = {}
        self._order: collections.deque[bytes] = collections.deque()
        self._times = array.array("q")
        self._head = 0  # the first live entry of _times (compacted when half is dead)
        self._last_ms = 0

    def __len__(self) -> int:
        return len(self.ids)

    def expire(self, now_ms: int) -> None:
        """Forget the keys first put before ``now_ms - window``."""
        cutoff = now_ms - self.window_ms
        times, order, ids = self._times, self._order, self.ids
        head = self._head
        while head < len(times) and times[head] < cutoff:
            del ids[order.popleft()]
            head += 1
        if head > 1024 and head * 2 > len(times):
            del times[:head]
            head = 0
        self._head = head

    def find(self, key: bytes) -> int | None:
        """The id of the first put of ``key`` within the window (call :meth:`expire` first)."""
        return self.ids.get(key)

    def add(self, key: bytes, item_id: int, add_ms: int) -> None:
        """Remember ``key`` as put with ``item_id`` at ``add_ms``; a key already remembered keeps
        its first id (the window runs from the first put)."""
        if key in self.ids:
            return
        self._last_ms = add_ms = max(add_ms, self._last_ms)  # keeps _times sorted
        self.ids[key] = item_id
        self._order.append(key)
        self._times.append(add_ms)

    def snapshot(self) -> tuple[list[bytes], array.array[int], dict[bytes, int]]:
        """Copies of the keys in add order, their add times and their ids, made with three C-level
        copies (for a caller holding the queue lock; :func:`columns` then orders the ids)."""
        return list(self._order), self._times[self._head :], self.ids.copy()


def columns(
    snapshot: tuple[list[bytes], array.array[int], dict[bytes, int]],
) -> tuple[list[bytes], list[int], array.array[int]]:
    """The keys, ids and add times of a :meth:`KeyWindow.snapshot`, each in add order: the
    columns :func:`dedupindex.encode_index` takes."""
    order, times, ids = snapshot
    return order, [ids[k] for k in order], times


class Producers:
    """Per producer id, the recent runs of tagged puts: ``[first sequence, first id, count]``."""

    def __init__(self, window: float = PRODUCER_WINDOW, max_runs: int = MAX_RUNS) -> None:
        self.window_ms = int(window * 1000)
        self.max_runs = max_runs
        # producer -> (runs, end of the highest sequence stored); ordered by last use
        self._by_id: collections.OrderedDict[int, tuple[collections.deque[list[int]], list[int]]] = (
            collections.OrderedDict()
        )
        self._last_ms: dict[int, int] = {}

    def __len__(self) -> int:
        return len(self._by_id)

    def runs(self, producer: int) -> list[tuple[int, int, int]]:
        """The runs remembered for ``producer``, oldest first (for tests and tools)."""
        entry = self._by_id.get(producer)
        return [] if entry is None else [(r[0], r[1], r[2]) for r in entry[0]]

    def expire(self, now_ms: int) -> None:
        """Forget the producers that put nothing since ``now_ms - window``."""
        cutoff = now_ms - self.window_ms
        while self._by_id:
            pid = next(iter(self._by_id))
            if self._last_ms[pid] >= cutoff:
                break
            del self._by_id[pid], self._last_ms[pid]

    def find(self, producer: int, first: int, count: int) -> list[int | None] | None:
        """The stored id of each of the sequences ``first .. first + count - 1`` (None for one not
        stored), or None when none is."""
        entry = self._by_id.get(producer)
        if entry is None or first >= entry[1][0]:
            return None  # the usual case: sequences beyond any stored
        found: list[int | None] = [None] * count
        hit = False
        end = first + count
        for run_seq, run_id, run_count in entry[0]:
            lo, hi = max(first, run_seq), min(end, run_seq + run_count)
            for seq in range(lo, hi):
                found[seq - first] = run_id + seq - run_seq
                hit = True
        return found if hit else None

    def add_one(self, producer: int, sequence: int, item_id: int, add_ms: int) -> None:
        """:meth:`add` of one pair; a put that continues its producer's last run (the usual
        case: a client's next put) only lengthens that run."""
        entry = self._by_id.get(producer)
        if entry is not None:
            runs, top = entry
            last = runs[-1] if runs else None
            if last is not None and sequence == last[0] + last[2] and item_id == last[1] + last[2]:
                last[2] += 1
                top[0] = max(top[0], sequence + 1)
                self._by_id.move_to_end(producer)
                if add_ms > self._last_ms[producer]:
                    self._last_ms[producer] = add_ms
                return
        self.add(producer, ((sequence, item_id),), add_ms)

    def add(self, producer: int, pairs: Sequence[tuple[int, int]], add_ms: int) -> None:
        """Remember ``(sequence, id)`` pairs stored for ``producer`` at ``add_ms``."""
        entry = self._by_id.get(producer)
        if entry is None:
            entry = self._by_id[producer] = (collections.deque(), [0])
        else:
            self._by_id.move_to_end(producer)
        self._last_ms[producer] = max(add_ms, self._last_ms.get(producer, 0))
        runs, top = entry
        for seq, item_id in pairs:
            last = runs[-1] if runs else None
            if last is not None and seq == last[0] + last[2] and item_id == last[1] + last[2]:
                last[2] += 1
            else:
                runs.append([seq, item_id, 1])
                if len(runs) > self.max_runs:
                    runs.popleft()
            top[0] = max(top[0], seq + 1)


def save_index(journal: Journal, keys: KeyWindow | None, lock: threading.Lock, mode: int) -> bool:
    """Write the keys of the window to ``<queue>.dedup`` (durably) before journal files are
    archived; ``lock`` is the queue lock, which guards ``keys``.  Returns whether it wrote:
    nothing without a window, nor when the window and the file are both empty."""
    if keys is None:
        return False
    now = dedupindex.now_ms()
    with lock:  # only copies under the queue lock: puts wait for nothing longer
        keys.expire(now)
        snap = keys.snapshot()
    order, ids, times = columns(snap)
    path = dedupindex.index_path(journal.directory, journal.name)
    if not order and not os.path.exists(path):
        return False
    dedupindex.write_index(path, order, ids, times, keys.window_ms, now, mode)
    return True


def _archived_keys(journal: Journal, keys: KeyWindow, cutoff: int) -> None:
    """Add to ``keys`` the entries of ``<queue>.dedup`` added at or after ``cutoff`` whose ids
    the journal no longer holds (for the others the journal is the truth)."""
    index = dedupindex.read_index(dedupindex.index_path(journal.directory, journal.name))
    if index is None:
        return
    first = journal.first_id()
    for key, item_id, add_ms in index.entries:
        if item_id < first and add_ms >= cutoff:
            keys.add(key, item_id, add_ms)


def rebuild(journal: Journal, keys: KeyWindow | None, producers: Producers | None, now_ms: int) -> int:
    """Fill ``keys`` and ``producers`` (either may be None) from the journal's records added within
    their windows of ``now_ms``, and ``keys`` first from the dedup index (the keys of archived
    files); returns the number of records read.  The scan starts at the last file started (the
    time in its header: appending to it began then) at or before the earliest cutoff; not by
    its name, which may be older (created ahead of need by ``Writer.reserve``, then waiting)."""
    if keys is not None:
        _archived_keys(journal, keys, now_ms - keys.window_ms)
    key_cutoff = now_ms - keys.window_ms if keys is not None else now_ms + 1
    producer_cutoff = now_ms - producers.window_ms if producers is not None else now_ms + 1
    cutoff = min(key_cutoff, producer_cutoff)
    files = journal.files
    start = files[0]
    for jf in files:
        if jf.header.created_ms <= cutoff:
            start = jf
    cursor = Cursor(start.ms, start.header.size, start.first_id)
    seen = 0
    while True:
        recs, cursor = journal.read(cursor, max_items=4096)
        if not recs:
            return seen
        seen += len(recs)
        for rec in recs:
            if type(rec) is not PutX or rec.add_ms < cutoff:
                continue
            meta = rec.meta
            if meta.producer and producers is not None and rec.add_ms >= producer_cutoff:
                producers.add(meta.producer, ((meta.sequence, rec.id),), rec.add_ms)
            if meta.key is not None and keys is not None and rec.add_ms >= key_cutoff:
                keys.add(meta.key, rec.id, rec.add_ms)
