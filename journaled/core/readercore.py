"""The reader core: one named reader's in-memory state, and the only code that changes it.

libkestrel's ``JournaledQueue`` reader side in one class (what holds items out of delivery order in its
base, core/holding.py): which item goes out next, who holds it, what waits out a delay or for a sink,
and what is settled.  It knows the journal through :class:`~journaled.core.readbehind.LogSource` and the
layer above through two callbacks; it never touches a file, a checkpoint or a thread.  Every attribute
and method is guarded by ``core.lock``, the owning queue's one lock (a put reaches all its readers at
once): callers hold it; nothing here takes it, waits on it, or runs user code under it.

Only the methods below change a core, and each leaves it whole (an item is in one place only: memory,
disk only, open, parked, behind a busy key, bound for a sink, or settled).  Every other module reads the
attributes listed on :class:`ReaderCore` and asks:

* the queue: ``on_put(items, nbytes)``, items appended to the journal, in id order.
* ``get``: ``take()``, the next deliverable item now an open read, or None: the smallest id due (F-41;
  parked items that fall due go back among the waiting ones in id order), items met on the way that are
  not due (``not_before``) parked until they are (as they arrive from ``on_put`` or are read back from
  disk), expired and ``max_errors`` ones to their sink instead, under key order those of a busy key to
  its line (core/keyorder.py); ``take_if_first()``, unless blocked gets are in line; ``join(w)`` /
  ``leave(w)``, the FIFO line of blocked gets (:class:`Waiter`), served by hand-off as items arrive.
* an open read ends, named as :meth:`~ReaderCore.open_read` names it (else ``UnknownRead``):
  ``commit(item)``; ``abort(item, delay)``, ``error_count + 1`` and to the dead letters at
  ``max_errors``, else back at once or parked (core/retry.py); ``reject(item, reason)``, to the dead
  letters without a retry; ``release(item)`` / ``release_id(id)``, back, no error counted.
* upkeep (core/policies.py, the engine, ``flush``): ``release_due``, ``expire_head``,
  ``expire_in_memory``, ``time_out_reads``, ``discard_waiting`` (counted as discarded);
  ``end_disposal(item)``, a sink has the item: settled.
* state: ``reset_to(head)`` (seek, counters kept); ``skip_to(id)`` (retention: only ids below go);
  ``checkpoint_state()``, ``counts()``, then ``mark_clean()``/``mark_dirty()``; ``reconfigure``,
  ``close``, ``close_in_child``; reading ``charged()``, ``backlog_items()``, ``backlog_payload()``.

A read is identified by its delivery, not by its item id: every time an item is handed out it is a
distinct :class:`Item` object (an aborted or released item is re-created before it goes back), so a
consumer whose read was taken away (``open_read_timeout``) can never settle the read the item's next
consumer holds.  Clocks: ``clock`` (passed in, else ``retry.CLOCK``): expiry on its ``time()``, open reads
and delays on its ``monotonic()``.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections import deque
from collections.abc import Callable

from journaled.config import ReaderConfig, Sink
from journaled.core import keyorder, retry
from journaled.core.holding import Holding
from journaled.core.readbehind import (
    ITEM_OVERHEAD,
    LogSource,
    drop_below,
    estimate_backlog_bytes,
    given_back,
    keep_window,
    payload_from,
    payload_of,
    read_window,
    stopped_at,
    take_in,
)
from journaled.core.waiters import Waiter
from journaled.deadletter import COUNTED_IN, DeadLetter
from journaled.errors import UnsupportedVersion
from journaled.format.smallfiles import COUNT_FIELDS, CheckpointData, ReaderCounts
from journaled.item import Item, is_expired
from journaled.log.journal import Cursor

log = logging.getLogger("journaled")

#: Most items one ``expire_head`` sweep expires, so the lock is never held for long.
SWEEP_LIMIT = 4096


class ReaderCore(Holding):
    """The delivery state of one named reader (the module docstring is its protocol).

    Attributes (read them under ``lock``; only this class changes them):
        head: every id below it is committed; done: ids above it committed out of order.
        errors: abort counts of uncommitted items.
        mem / mem_bytes: items ready for delivery, in id order (reads given back go to the left end),
            and their payload bytes (:meth:`charged` adds ``ITEM_OVERHEAD`` per item).
        load_id / load_cursor: when set, ids from there on are on disk only (read-behind), read back in
            order as ``mem`` drains, so memory stays within ``max_memory``; every item in hand (in
            memory, open, parked, behind a busy key, bound for a sink) has an id below it.
        open: open reads by id (the delivery handed out); opened_at: their ``clock.monotonic()`` of
            delivery, in delivery order (``open_read_timeout`` only).
        waiters: blocked ``get`` calls, served first come first served by direct hand-off.
        disposing: items bound for an expiry / dead-letter sink, not yet settled.
        parked: aborted items waiting out a delay, and items not due yet (``not_before``)
            (:class:`~journaled.core.retry.Parked`), in memory but not charged to ``max_memory``.
        keys: under ``key_order``, the lines of items behind busy keys and what holds each key
            (:class:`~journaled.core.keyorder.KeyOrder`: ``count``, ``oldest_wait(now)``), else None.
        saw_expiry: some item with an ``expire_at`` reached this reader.
        backlog_bytes / backlog_exact: payload bytes of uncommitted items, kept incrementally; an
            estimate after a reopen until :meth:`backlog_payload` can count them.
        dirty: changed since the last checkpoint was taken; closed: no more deliveries (forked: in a child).
        delivered, committed, aborted, timed_out, expired, discarded, dead_lettered, rejected: counters
            for stats, and ``put_origin`` (``put`` is ``next_id - put_origin``); all kept in the
            checkpoint (:meth:`counts`); ``lost_to_retention`` only since the open.
    """

    def __init__(
        self,
        name: str,
        config: ReaderConfig,
        state: CheckpointData,
        lock: threading.Lock,
        journal: LogSource,
        head_moved: Callable[[], None],
        wake_engine: Callable[[], None],
        clock: retry.Clock | None = None,
    ) -> None:
        self.name = name
        self.clock = retry.default_clock() if clock is None else clock
        self.config, self.lock, self.journal = config, lock, journal
        # upward calls, made with the lock held; both only set a flag or an event:
        self.head_moved, self.wake_engine = head_moved, wake_engine  # archiving may be possible / work to do
        self.waiters: deque[Waiter] = deque()
        self.closed = self.forked = False
        counts = state.counts  # they outlive the owner: loaded here, never by a seek
        self.put_origin = journal.next_id if counts.put_origin is None else counts.put_origin
        self.delivered, self.committed, self.aborted = counts.delivered, counts.committed, counts.aborted
        self.timed_out, self.expired, self.discarded = counts.timed_out, counts.expired, counts.discarded
        self.dead_lettered, self.rejected = counts.dead_lettered, counts.rejected
        self.saw_expiry, self.lost_to_retention = False, 0  # lost: archived uncommitted, this open
        self._avg_payload = 0  # payload size seen by the last refill (bounds what it decodes)
        self.stopped: str | None = None  # why read-behind cannot go on ([F-11]), or None
        self._place(state)

    def _place(self, state: CheckpointData) -> None:
        """The state a checkpoint describes: nothing open, parked or in memory yet."""
        head = state.head
        self.head = head
        self.done: set[int] = {i for i in state.done if i >= head}
        self.errors = dict(state.errors)
        self.open = {}
        self.opened_at: dict[int, float] = {}
        self.mem = deque()
        self.mem_bytes = 0
        self.parked = retry.Parked()
        self.given_back = set()  # ids put back at the head, the first delivered (F-41)
        self.disposing: dict[int, tuple[DeadLetter, Sink]] = {}
        self.keys = keyorder.KeyOrder(keyorder.line_limit(self.config)) if self.config.key_order else None
        self.load_id: int | None = head if head < self.journal.next_id else None  # the rest: on disk
        # where the head's record is, from the checkpoint: a hint, verified before it is used
        self.load_cursor = Cursor(state.file_ms, state.file_offset, -1) if state.file_ms else None
        self.backlog_bytes = estimate_backlog_bytes(self.journal, head, state.file_ms, state.file_offset)
        self.backlog_exact, self.dirty = self.backlog_items() == 0, True

    # ------------------------------------------------------------------ fed by the queue
    def on_put(self, items: list[Item], nbytes: int) -> None:
        """New items were appended to the journal (ids in order, ``nbytes`` of payload)."""
        self.backlog_bytes += nbytes
        if items[0].expire_at is not None and not self.saw_expiry:
            self.saw_expiry = True
            self.wake_engine()  # start the expiry sweep
        if self.load_id is None:  # else they stay on disk, met (due or not) where read-behind reaches them
            hold = self._hold if keyorder.may_hold(items) else None  # park the not-yet-due
            added, load_id = take_in(self.mem, items, nbytes, self.config.max_memory - self.charged(), hold)
            self.mem_bytes += added
            if load_id is not None:  # read-behind from there on
                self.load_id, self.load_cursor = load_id, None
        if self.waiters:
            try:
                self._hand_off()
            except Exception as exc:
                # The items are in the journal and in this reader's state already: a failed
                # read-behind refill must not fail the put (nor keep them from later readers).
                # The waiters stay in line; the next put, abort or get retries the read.
                log.error("reader %s: handing new items to a waiting get failed: %s", self.name, exc)

    def charged(self) -> int:
        """What the items waiting in memory (behind a busy key too) count against ``max_memory``."""
        behind = 0 if self.keys is None else self.keys.charge()  # spilled ones are on disk
        return self.mem_bytes + len(self.mem) * ITEM_OVERHEAD + behind

    # ------------------------------------------------------------------ read-behind
    def _refill(self) -> None:
        """Read items back from the journal once memory has drained to half its bound.  When
        memory is empty, go on until an item turns up or the journal ends: a window may hold only
        ids to skip, and ``get`` must not report Empty with items still waiting on disk."""
        while True:
            before = self.load_id
            try:
                self._refill_once()
            except UnsupportedVersion as exc:  # for good: get raises it, stats and health say why
                self.stopped = self.stopped or stopped_at(self.name, exc)
                raise
            if self.mem or self.load_id is None or self.load_id == before:
                return

    def _refill_once(self) -> None:
        if self.load_id is None or self.charged() > self.config.max_memory // 2:
            return
        journal = self.journal
        if self.load_id >= journal.next_id:
            self.load_id = None  # caught up: new puts go straight to memory again
            self.load_cursor = None
            return
        room = self.config.max_memory - self.charged()
        items, payload, expiring, cursor = read_window(
            journal, self.load_id, self.load_cursor, room, self._avg_payload, self.errors
        )
        if items:
            self._avg_payload = payload // len(items)
        expected = self.load_id
        clean = expected >= self.head and not (self.done or self.disposing or self.parked)
        clean = clean and all(i < expected for i in self.open)
        kept, kept_bytes, gaps, expected = keep_window(items, payload, expected, None if clean else self._has)
        if kept and (type(kept[0]) is not Item or len(set(map(type, kept))) > 1):  # some with metadata
            kept_bytes = payload_of(kept := [it for it in kept if not self._hold(it)])
        for first, last in gaps:
            self._lost(first, last)
        self.mem.extend(kept)
        self.mem_bytes += kept_bytes
        self.saw_expiry = self.saw_expiry or expiring
        if expected < cursor.next_id <= journal.next_id:
            self._lost(expected, cursor.next_id - 1)  # damage skipped at the end
            expected = cursor.next_id
        caught_up = expected >= journal.next_id  # new puts go straight to memory again
        self.load_id, self.load_cursor = (None, None) if caught_up else (expected, cursor)

    def _has(self, item_id: int) -> bool:
        """Is ``item_id`` settled, open, parked or bound for a sink (not to be read back)?"""
        if item_id < self.head or item_id in self.done or item_id in self.open:
            return True
        return item_id in self.disposing or item_id in self.parked

    def _lost(self, first: int, last: int) -> None:
        """Ids ``first..last`` can never be delivered (damaged, archived): committed, so the head goes on."""
        log.warning("reader %s: items %d..%d are lost (journal damage); skipping", self.name, first, last)
        for i in range(max(first, self.head), last + 1):
            self._commit_id(i)

    def _peek_waiting(self) -> Item | None:
        """The next waiting item (read back from disk if memory is empty), left in place."""
        if not self.mem:
            self._refill()
        return self.mem[0] if self.mem else None

    def _pop_waiting(self) -> Item | None:
        """Remove and return the next waiting item; the caller opens, disposes of or settles it."""
        if not self.mem:
            self._refill()
            if not self.mem:
                return None
        item = self.mem.popleft()
        self.mem_bytes -= len(item.data)
        if self.load_id is not None and self.charged() <= self.config.max_memory // 2:
            try:
                self._refill()
            except UnsupportedVersion:  # what came before the record is delivered first
                pass
            except BaseException:
                # a read error must not strand the item already taken: it stays the next one
                self.mem.appendleft(item)
                self.mem_bytes += len(item.data)
                raise
        return item

    # ------------------------------------------------------------------ delivery
    def take(self) -> Item | None:
        """The next deliverable item, now an open read; ``None`` when nothing waits.

        Checked here, at delivery itself, so an item that expires after a sweep is still never
        delivered, and cannot wedge the head: it goes to its sink and the next one is considered.
        """
        if self.parked:
            self._unpark(self.clock.monotonic())
        cfg, keys, key = self.config, self.keys, None
        while True:
            item = self._pop_waiting() if keys is None or not keys.pending else self._next_waiting()
            if item is None:
                return None
            if keys is not None and (key := keyorder.key_of(item)) is not None and not self._admit(item, key):
                continue  # its key is busy: it waits in its key's line
            if type(item) is not Item and self._hold(item, True):
                continue  # not due yet: parked (or expired before it is due)
            if (item.expire_at is not None or cfg.max_age is not None) and is_expired(
                item, cfg.max_age, self.clock.time()
            ):
                self._dispose(item, "expired")
            elif cfg.max_errors is not None and item.error_count >= cfg.max_errors:
                self._dispose(item, "max_errors")
            else:
                break
        self.open[item.id] = item
        if keys is not None and key is not None:
            keys.opened(key)
        self.delivered += 1
        if cfg.open_read_timeout is not None:
            opened = self.opened_at
            opened.pop(item.id, None)  # re-insert: dict order is delivery order
            opened[item.id] = self.clock.monotonic()
            if len(opened) == 1:
                self.wake_engine()  # the background tick may be idle
        return item

    def take_if_first(self) -> Item | None:
        """:meth:`take`, unless blocked ``get`` calls are already in line (they go first)."""
        return None if self.waiters else self.take()

    def _hand_off(self) -> None:
        """Give waiting items to blocked ``get`` calls, first come first served."""
        while self.waiters:
            item = self.take()
            if item is None:
                return
            self.waiters.popleft().deliver(item)

    def join(self, waiter: Waiter) -> None:
        """Put a blocked ``get`` at the end of the line."""
        self.waiters.append(waiter)

    def leave(self, waiter: Waiter) -> None:
        """Take a blocked ``get`` out of the line (timed out, cancelled); no-op if gone."""
        with contextlib.suppress(ValueError):
            self.waiters.remove(waiter)

    # ------------------------------------------------------------------ an open read ends
    def open_read(self, item: object) -> Item:
        """The open read ``item`` (an Item or an id) names (:func:`journaled.core.retry.open_read`,
        whose ``TypeError`` for anything else is why the settling methods take ``object``)."""
        return retry.open_read(self.open, item, self.name)

    def commit(self, item: object) -> None:
        """Finish the open read ``item`` names: settled for good."""
        # perf: the common case (the Item handed out, still open) without open_read's call
        current = self.open.get(item.id) if type(item) is Item else None
        if current is None or current is not item:
            current = self.open_read(item)
        self._end_read(current, True)  # under key order its key is free: the next of the key may go
        self._settle(current, False)
        self.committed += 1
        self._serve_keys()  # the key's next item may be waiting for blocked gets

    def abort(self, item: object, delay: float | None = None) -> None:
        """Close the open read ``item`` names as failed: ``error_count + 1``, then to the dead
        letters once ``max_errors`` is reached, else back to the head after ``delay`` seconds
        (``None``: the reader's backoff; :func:`journaled.core.retry.due_time`)."""
        self._end_read(item := self.open_read(item))
        self.aborted += 1
        failed = retry.redelivery(item, item.error_count + 1)
        self.errors[item.id] = failed.error_count  # also until a sink has it: survives a crash
        self.dirty = True
        cfg = self.config
        if cfg.max_errors is not None and failed.error_count >= cfg.max_errors:
            self._dispose(failed, "max_errors")
            self._serve_keys()
            return
        due = retry.due_time(cfg, failed.error_count, delay, self.clock.monotonic())
        if due is None:
            self._requeue(failed)
        else:
            self._park(failed, due)

    def reject(self, item: object, reason: str = "") -> None:
        """Close the open read ``item`` names for good, without a retry: to ``dead_letter``
        (dropped when there is none), its error count unchanged."""
        self._end_read(item := self.open_read(item))
        self._dispose(item, "rejected", reason)
        self._serve_keys()

    def release(self, item: object) -> None:
        """Give the open read ``item`` names back to the head without counting an error."""
        self._end_read(item := self.open_read(item))
        self._requeue(retry.redelivery(item, item.error_count))

    def release_id(self, item_id: int) -> bool:
        """:meth:`release` by id, for hand-offs nobody received; False if not open."""
        if (item := self.open.get(item_id)) is not None:
            self.release(item)
        return item is not None

    def _requeue(self, item: Item) -> None:
        """Put ``item`` back at the head (it is the next one delivered) and serve waiters."""
        self.errors[item.id] = item.error_count
        self.dirty = True
        if self.keys is not None and self._line_back(item):
            return  # to its key's line
        self.given_back = given_back(self.mem, self.given_back, item.id)
        self.mem.appendleft(item)
        self.mem_bytes += len(item.data)
        if self.waiters:
            self._hand_off()

    def _settle(self, item: Item, wake: bool = True) -> None:
        """``item`` leaves this reader for good (committed, discarded, expired, dead-lettered)."""
        self.errors.pop(item.id, None)
        self.backlog_bytes = max(0, self.backlog_bytes - len(item.data))
        self._commit_id(item.id)
        if wake and self.keys is not None:
            self._key_free(item)

    def _commit_id(self, item_id: int) -> None:
        if item_id == self.head:
            self.head += 1
            done = self.done
            while self.head in done:
                done.remove(self.head)
                self.head += 1
            self.head_moved()
        elif item_id > self.head:
            self.done.add(item_id)
        self.dirty = True

    def _dispose(self, item: Item, kind: str, reason: str = "") -> None:
        """Take ``item`` out of delivery for good: ``kind`` is ``"expired"``, ``"max_errors"`` or
        ``"rejected"`` (:data:`journaled.deadletter.KINDS`).  Without a sink it is settled now;
        else it waits in ``disposing`` until the engine, outside the lock, has handed its sink a
        :class:`DeadLetter` (:meth:`end_disposal`)."""
        cfg = self.config
        if kind == "expired":
            self.expired += 1
            sink: Sink | None = cfg.expire_to
            reason = reason or "expired"
        elif kind == "rejected":
            self.rejected += 1
            sink = cfg.dead_letter
        else:
            self.dead_lettered += 1
            sink = cfg.dead_letter
            reason = f"aborted {item.error_count} times (max_errors={cfg.max_errors})"
            where = "moved to dead_letter" if sink is not None else "dropped"
            log.warning("reader %s: item %d %s; %s", self.name, item.id, reason, where)
        if sink is None:
            self._settle(item)
            return
        if self.keys is not None:
            self._key_free(item)  # its key is free now, before the sink has it
        self.disposing[item.id] = (DeadLetter.of(item, kind, reason, self.name), sink)
        self.wake_engine()

    # ------------------------------------------------------------------ upkeep
    def expire_head(self, now: float) -> int:
        """Send expired items at the head (in memory, read back as needed) to their sink, up to
        ``SWEEP_LIMIT`` (items expiring behind a live one: :meth:`take`), and those already at
        ``max_errors`` (a closed destination refused them before a reopen).  Returns how many."""
        max_age, most, count = self.config.max_age, self.config.max_errors, 0
        while count < SWEEP_LIMIT:
            item = self._peek_waiting()
            if item is None:
                break
            if is_expired(item, max_age, now):
                kind = "expired"
            elif most is not None and item.error_count >= most:
                kind = "max_errors"
            else:
                break
            self._pop_waiting()
            self._dispose(item, kind)
            count += 1
        if count:
            self._serve_keys()
        return count

    def time_out_reads(self, now_mono: float) -> int:
        """Abort reads open longer than ``open_read_timeout`` at ``now_mono``.  ``opened_at`` is
        in delivery order, so this stops at the first read still within its time; entries of
        reads already ended are dropped on the way.  Returns how many timed out."""
        timeout = self.config.open_read_timeout
        opened = self.opened_at
        if timeout is None:
            opened.clear()
            return 0
        count = 0
        for item_id in list(opened):
            item = self.open.get(item_id)
            if item is not None and now_mono - opened[item_id] < timeout:
                break
            del opened[item_id]
            if item is None:
                continue
            log.warning("reader %s: read of item %d open over %ss; aborted", self.name, item_id, timeout)
            self.timed_out += 1
            self.abort(item)
            count += 1
        return count

    def discard_waiting(self, limit: int) -> int:
        """Drop up to ``limit`` of the oldest waiting items (read back from disk as needed; open
        and parked ones are never dropped), counted as ``discarded``.  Returns how many."""
        n = 0
        while n < limit:
            item = self._next_waiting() or self._lined_oldest()  # behind a busy key: waiting too
            if item is None:
                break
            self._settle(item)
            n += 1
        self.discarded += n
        return n

    def end_disposal(self, item: Item) -> None:
        """A sink has ``item`` (or failed for good): settled, unless a seek forgot it meanwhile."""
        if self.disposing.pop(item.id, None) is not None:
            self._settle(item, wake=False)  # its key was freed when it was disposed of

    # ------------------------------------------------------------------ state
    def reset_to(self, head: int) -> None:
        """Every id from ``head`` on uncommitted, every id below it committed, as for a new
        reader placed there: open reads are taken back (committing one raises
        ``UnknownRead``); parked items, error counts and items not yet handed to their sink are
        forgotten; counters stay.  Then waiters are served."""
        self._place(CheckpointData(head))
        self.head_moved()
        if self.waiters:
            self._hand_off()

    def skip_to(self, first: int) -> int:
        """Retention archived every id below ``first`` (F-36): the head moves there, and only what
        is below it goes (open reads, parked and waiting items, ``done`` and ``errors`` entries);
        from ``first`` on all stays as it was.  Items bound for a sink still reach it.  Returns
        how many uncommitted items were lost (added to ``lost_to_retention``)."""
        if first <= self.head:
            return 0
        lost = first - self.head - sum(i < first for i in self.done) - sum(i < first for i in self.disposing)
        self.done = {i for i in self.done if i >= first}
        self.errors = {i: c for i, c in self.errors.items() if i >= first}
        self.open = {i: it for i, it in self.open.items() if i >= first}  # opened_at: time_out_reads
        self.parked.drop_below(first)
        self.mem_bytes -= drop_below(self.mem, first)
        if self.keys is not None:
            self._rekey(True, first)
        if self.load_id is not None and self.load_id < first:  # read-behind goes on at `first`
            self.load_id, self.load_cursor = (first if first < self.journal.next_id else None), None
        self.head = first - 1
        self._commit_id(first - 1)  # the head moves on over ids committed out of order
        # partly on disk only: estimated again, exact once all uncommitted items are in memory
        self.backlog_bytes = estimate_backlog_bytes(self.journal, self.head, 0, 0)
        self.backlog_exact = self.backlog_items() == 0
        self.lost_to_retention += lost
        return lost

    def backlog_items(self) -> int:
        """Uncommitted items (waiting, open, parked or bound for a sink): exact, and derived only
        from durable state, so it is the same after a reopen."""
        return self.journal.next_id - self.head - len(self.done)

    def backlog_payload(self) -> int:
        """Payload bytes of the uncommitted items.  Kept incrementally (exact within a session);
        after a reopen an estimate, exact once every uncommitted item is in memory or none is left;
        a compressed journal's sizes say too little, so the first call reads its backlog once."""
        if self.backlog_items() == 0:  # also corrects ids lost to damage, whose sizes were never known
            self.backlog_bytes, self.backlog_exact = 0, True
        elif not self.backlog_exact and self.load_id is None and self._in_hand():
            held = (self.open.values(), self.parked.values(), (i for i, _s in self.disposing.values()))
            lined = 0 if self.keys is None else self.keys.nbytes
            self.backlog_bytes, self.backlog_exact = self.mem_bytes + lined + payload_of(*held), True
        elif not self.backlog_exact and self.journal.compressed:
            self.backlog_bytes, self.backlog_exact = payload_from(self.journal, self.head, self.done), True
        return self.backlog_bytes

    def checkpoint_state(self) -> CheckpointData:
        """What this reader's checkpoint file should say now."""
        ms, offset = self.journal.hint(self.head)
        errors = tuple(sorted((i, c) for i, c in self.errors.items() if i >= self.head and c))
        return CheckpointData(self.head, ms, offset, tuple(sorted(self.done)), errors, self.counts())

    def counts(self) -> ReaderCounts:
        """The counters as the checkpoint keeps them: as its head and ``done`` reflect them, so an
        item still bound for a sink is left out (decided, and counted, again after a reopen)."""
        counts = {name: getattr(self, name) for name in COUNT_FIELDS}
        for letter, _sink in self.disposing.values():
            field = COUNTED_IN[letter.kind]
            counts[field] -= 1
        return ReaderCounts(**counts)

    def mark_clean(self) -> None:
        """The checkpoint just taken (:meth:`checkpoint_state`) is the one to write."""
        self.dirty = False

    def mark_dirty(self) -> None:
        """The checkpoint must be written again (a write failed, or the queue is closing)."""
        self.dirty = True

    def reconfigure(self, config: ReaderConfig) -> None:
        """Apply new policies from now on (what is in memory and open stays where it is)."""
        self.config = config
        self._switch_keys(config.key_order)

    def close(self, wake: bool = True) -> None:
        """No more deliveries.  Blocked ``get`` calls are woken (they raise ``QueueClosed``)
        unless ``wake`` is False (at interpreter exit, when only daemon threads are left)."""
        self.closed = True
        if wake:
            for waiter in self.waiters:
                waiter.wake()

    def close_in_child(self, lock: threading.Lock) -> None:
        """In a forked child: closed, its waiters (threads of the parent) left alone, and
        guarded by ``lock`` from now on (the old one may have been held at the fork)."""
        self.lock = lock
        self.closed = self.forked = True
