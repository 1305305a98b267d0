"""The whole-queue model (issue 34): one state machine drives a real queue with every delivery
feature at once against the plain model of the promises in tests/support/queuemodel.py.

Rules: put and put_many with keys (dedup window on), headers, delay/not_before and expiry (ttl);
plain puts whose record CRC starts with a zero byte (found by trying payloads against the
active file's salt and offset, F-13/section 5), payloads of many sizes; get, get_many, commit,
commit_many, abort (with and without a delay), release, reject; live reconfiguration
(``max_memory`` up and down, ``max_errors``, a dead-letter queue: another queue or the queue
itself, key order on and off); seek (earliest, latest, an id); checkpoint; archiving; retention by
age and bytes (set at a reopen, as it is stored with the queue); clean close and reopen; a crash
(the directory as it stands on disk, reopened); the clock moving.  Readers read behind from tiny
``max_memory`` over journal files of a few hundred bytes, so windows are cut everywhere.  A third of
the runs have no dedup window, so that items of one key pile up for key order.

Checked at every delivery (ReaderModel.check_delivery): the id is one the reader may get now
(never a committed, open, expired, not-yet-due or foreign id; the returned stack first, then
id order among the due; under key order never a second open item of a key, nor one of a key
ahead of an earlier one), with the payload, key, headers, add time, expiry, not-before and
error count it must carry.  At every ``Empty``: nothing was due.  After every step
(``promises_hold``): each reader's head has only settled ids below it, its open reads and
counters agree with the model, ``stats()`` agrees, every dead letter the model expects is in
its destination exactly as it left, and archiving lost nothing without a retention limit.

Known bugs of issue 34 still open on main are gated by the KNOWN_BUG_* switches below: while a
switch is True the machine avoids (or tolerates) exactly that case.  Flip it when the fix lands.
"""

from __future__ import annotations

import logging
import os
import random
import re
import shutil
import tempfile
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import SHM
from journaled import DeadLetter, Empty, JournaledQueue, QueueConfig, UnknownRead
from journaled import queue as queue_module
from journaled import stats as stats_module
from journaled.core import retry
from journaled.disk import dedupindex, fileio
from journaled.format import record
from journaled.log import state as log_state
from journaled.log import writer
from journaled.owner import adoption, engine, putpath
from support.queuemodel import DedupModel, ModelClock, ReaderModel, Refused, Spec

# ---------------------------------------------------------------------------- known bugs (issue 34)
#: Point 1: a read window ending 1-8 bytes into a record whose CRC starts with 0x00 loses it.
#: While True, no plain put is steered to a zero first CRC byte (sizes still vary at random), and
#: the ids a reader logs as "lost (journal damage)" are taken as gone (the journal is clean: the
#: machine never damages it, so every such line is this bug).
KNOWN_BUG_1_ZERO_CRC_WINDOW = False
#: Point 2: an item put with a delay/not_before under read-behind is delivered twice.  While True,
#: delayed puts are only made while every reader holds its whole backlog in memory.
KNOWN_BUG_2_DELAYED_READBEHIND = False
#: Point 3: dedup forgets keys whose journal file was archived, after a reopen.  While True, a
#: key whose original record's file was archived is not put again after a reopen.
KNOWN_BUG_3_DEDUP_ARCHIVED = False
#: Point 4: retention drops done sets and error counts above the new head.  While True, the
#: machine does not archive past retention while a reader has done ids or errors above its head.
KNOWN_BUG_4_RETENTION_DONE = False
#: Point 5: due not-before items are delivered ahead of earlier due items.  While True, the
#: order of a due not-before item against the other fresh items is not checked.
KNOWN_BUG_5_NOT_BEFORE_ORDER = False
#: Point 7: a dead-letter queue that is the queue itself is lost at reopen.  While True, a
#: reader's dead letter is never the queue itself.
KNOWN_BUG_7_SELF_DEAD_LETTER = False

NAMES = ("r0", "r1")
#: Ids readers lost to point 1 in this process while its switch tolerated them (soak_model.py prints it).
POINT1_LOSSES = [0]
TICK_MS = 125  # delays, ttls and not-befores are multiples: exact in binary, whole ms
#: Every module whose clock reads the model controls (dedupindex: the key window saved before archiving).
#: The compiled modules are given it instead, through their CLOCK attributes
#: (retry.CLOCK for the reader cores, putpath.CLOCK for the put path, log_state.CLOCK for the journal's
#: file names and times): see GIVEN.
CLOCKED = (stats_module, adoption, queue_module, dedupindex)
GIVEN = ((retry, "CLOCK"), (putpath, "CLOCK"), (log_state, "CLOCK"))


class DamageLog(logging.Handler):
    """Collects the ids readers report as lost to journal damage (there is none: see point 1)."""

    PATTERN = re.compile(r"reader (\S+): items (\d+)\.\.(\d+) are lost \(journal damage\)")

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lost: list[tuple[str, int, int]] = []

    def emit(self, record: logging.LogRecord) -> None:
        if (m := self.PATTERN.search(record.getMessage())) is not None:
            self.lost.append((m.group(1), int(m.group(2)), int(m.group(3))))


class Salts:
    """``secrets`` for the journal writer: file salts from a seeded generator, so which records'
    CRCs start with a zero byte (and so a failing run) replays from the hypothesis seed."""

    def __init__(self) -> None:
        self.rng = random.Random(0)

    def randbits(self, k: int) -> int:
        return self.rng.getrandbits(k)


class NoSyncOps(fileio.FileOps):
    """fsync plays no part here (a crash is a copy of the directory, which sees the page cache)."""

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


def payload(seed: int, size: int) -> bytes:
    return ((seed % 65536).to_bytes(2, "little") * (size // 2 + 1))[:size]


sizes = st.one_of(st.integers(0, 40), st.integers(41, 300))
keys = st.one_of(st.none(), st.sampled_from([b"k%d" % i for i in range(8)]))
headers = st.one_of(st.none(), st.just({"h": b"v"}), st.just({"content-type": b"x", "n": b"\x00\x01"}))
ttls = st.one_of(st.none(), st.integers(1, 24).map(lambda n: n * TICK_MS))
delays = st.one_of(st.none(), st.integers(1, 16).map(lambda n: n * TICK_MS))
mems = st.one_of(st.sampled_from([1, 40, 200, 1000, 1 << 20]), st.integers(250, 3000))


class QueueModelMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._ops = fileio.use(NoSyncOps())
        self._ops.__enter__()
        self.clock = ModelClock()
        # The background threads would apply policies, dispose and archive at moments of their
        # own: the machine runs each of those steps itself (run_policies, archive, checkpoint),
        # so a failing run replays exactly.  Their timing is the concurrency tests' business.
        # The lease thread too (Engine.watch_directory): it wakes on the real clock to renew
        # the lease file (a write that may land while crash() copies the directory) and to
        # ask for archiving when bookmarks move.
        self._engine_start = engine.Engine.start
        self._engine_watch = engine.Engine.watch_directory
        engine.Engine.start = lambda self: None  # type: ignore[method-assign]
        engine.Engine.watch_directory = lambda self, *a: None  # type: ignore[method-assign]
        self._secrets = writer.SALTS
        self.salts = Salts()
        writer.SALTS = self.salts  # the writers of queues opened from now on use it
        self.damage = DamageLog()
        logging.getLogger("journaled").addHandler(self.damage)
        self.point1_losses = 0
        self._saved = {m: m.time for m in CLOCKED}
        for m in CLOCKED:
            m.time = self.clock  # type: ignore[attr-defined]
        self._given = [getattr(m, name) for m, name in GIVEN]
        for m, name in GIVEN:
            setattr(m, name, self.clock)
        self.root = tempfile.mkdtemp(prefix="journaled-model-", dir=SHM)
        self.path = os.path.join(self.root, "q")
        self.dlq_path = os.path.join(self.root, "dlq")
        self.q: JournaledQueue | None = None
        self.dlq: JournaledQueue | None = None
        self.items: dict[int, Spec] = {}
        self.readers: dict[str, ReaderModel] = {}
        self.next_id = 1
        self.expected_dead: list[tuple[str, int, str | None]] = []  # (reader, id, destination)
        self.seen_dead: dict[str, list[DeadLetter]] = {"dlq": [], "self": []}
        self.retention: dict[str, Any] = {}
        self.baseline: dict[str, Any] = {}
        self.crashed_since_open = False
        self.dedup: DedupModel | None = None
        self.archived_keys: set[bytes] = set()
        self.zero_crc_puts = 0
        self.compression: str | None = None  # QueueConfig.compression at the next open (None: as stored)

    # ------------------------------------------------------------------ setup / teardown
    def _qconfig(self) -> QueueConfig:
        return QueueConfig(
            sync="never",
            journal_size=self.journal_size,
            checkpoint_interval=3600.0,
            dedup_window=self.window_s,
            retention_age=self.retention.get("retention_age", -1),
            retention_bytes=self.retention.get("retention_bytes", -1),
            compression=self.compression,
        )

    @initialize(
        journal_size=st.sampled_from([300, 700, 2000]),
        reader_mems=st.lists(mems, min_size=2, max_size=2),
        window_s=st.sampled_from([2.0, 3600.0, None]),
        salt_seed=st.integers(0, 2**32 - 1),
        key_orders=st.lists(st.booleans(), min_size=2, max_size=2),
        compression=st.sampled_from([None, "zstd"]),
    )
    def start(
        self,
        journal_size: int,
        reader_mems: list[int],
        window_s: float | None,
        salt_seed: int,
        key_orders: list[bool] | None = None,
        compression: str | None = None,
    ) -> None:
        # compression is a configuration under every rule: put_many batches become compressed
        # units (docs/format.md 4.5) that every read, crash and reopen below goes through
        self.compression = compression
        self.salts.rng.seed(salt_seed)
        self.journal_size, self.window_s = journal_size, window_s
        self.dedup = DedupModel(None if window_s is None else int(window_s * 1000))
        self.dlq = JournaledQueue(self.dlq_path, QueueConfig(sync="never", checkpoint_interval=3600.0))
        self.dlq.reader("ops")
        self.q = JournaledQueue(self.path, self._qconfig(), name="q")
        for name, mem, ordered in zip(NAMES, reader_mems, key_orders or [False, False]):
            self.q.reader(name)
            self.q.set_reader_settings(name, {"max_memory": mem, "key_order": ordered})
            self.readers[name] = ReaderModel(name, start=1, key_order=ordered)
        self._open_baseline()

    def teardown(self) -> None:
        try:
            for q in (self.q, self.dlq):
                if q is not None and not q.closed:
                    q.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self._ops.__exit__(None, None, None)
            for m, t in self._saved.items():
                m.time = t  # type: ignore[attr-defined]
            for (m, name), clock in zip(GIVEN, self._given):
                setattr(m, name, clock)
            engine.Engine.start = self._engine_start  # type: ignore[method-assign]
            engine.Engine.watch_directory = self._engine_watch  # type: ignore[method-assign]
            writer.SALTS = self._secrets
            logging.getLogger("journaled").removeHandler(self.damage)

    def _open_baseline(self) -> None:
        assert self.q is not None
        self.baseline = {r.name: r for r in self.q.stats().readers}
        for m in self.readers.values():
            m.committed = m.dead_lettered = m.rejected = 0
            m.lost_to_retention = 0
        self.lost_range = {n: (0, 0) for n in self.readers}

    # ------------------------------------------------------------------ producing
    def _store(self, item_id: int, data: bytes, key, hdrs, ttl_ms, nb_ms) -> None:
        assert item_id == self.next_id, f"put returned id {item_id}, the next id is {self.next_id}"
        self.next_id += 1
        exp = max(1, self.clock.ms + ttl_ms) if ttl_ms is not None else 0
        self.items[item_id] = Spec(item_id, data, self.clock.ms, exp, nb_ms or 0, key, dict(hdrs or {}))
        assert self.dedup is not None
        self.dedup.stored(key, item_id, self.clock.ms)

    def _delay_allowed(self) -> bool:
        if not KNOWN_BUG_2_DELAYED_READBEHIND:
            return True
        assert self.q is not None
        return all(r.items_on_disk == 0 and r.bytes_in_memory < 150 for r in self.q.stats().readers) and all(
            self.q.reader(n).config.max_memory >= (1 << 20) for n in self.readers
        )

    def _key_allowed(self, key: bytes | None) -> bool:
        return key is None or not (KNOWN_BUG_3_DEDUP_ARCHIVED and key in self.archived_keys)

    def _nb_ms(self, delay_ms: int | None, absolute: bool) -> int | None:
        if delay_ms is None:
            return None
        # a delay counts from the put's add time (whole ms, as a ttl does, F-32); an absolute
        # not_before of whole ticks is stored exactly
        return self.clock.ms + delay_ms

    @rule(
        size=sizes,
        seed=st.integers(0, 65535),
        key=keys,
        hdrs=headers,
        ttl_ms=ttls,
        delay_ms=delays,
        absolute=st.booleans(),
    )
    def put(self, size, seed, key, hdrs, ttl_ms, delay_ms, absolute) -> None:
        assert self.q is not None and self.dedup is not None
        if not self._key_allowed(key) or (delay_ms is not None and not self._delay_allowed()):
            key, delay_ms = None, None
        data = payload(seed, size)
        kw: dict[str, Any] = {"key": key, "headers": hdrs}
        if ttl_ms is not None:
            kw["ttl"] = ttl_ms / 1000
        if delay_ms is not None:
            if absolute:
                kw["not_before"] = (self.clock.ms + delay_ms) / 1000
            else:
                kw["delay"] = delay_ms / 1000
        first, sure = self.dedup.lookup(key, self.clock.ms)
        got = self.q.put(data, **kw)
        if first is not None and (sure or got == first):
            assert got == first, f"key {key!r} put again within the window: id {got}, want {first}"
            return
        self._store(got, data, key, hdrs, ttl_ms, self._nb_ms(delay_ms, absolute))

    @rule(
        sizes_=st.lists(sizes, min_size=1, max_size=8),
        seed=st.integers(0, 65535),
        ks=st.lists(keys, min_size=8, max_size=8),
        hdrs=headers,
        ttl_ms=ttls,
        delay_ms=delays,
    )
    def put_many(self, sizes_, seed, ks, hdrs, ttl_ms, delay_ms) -> None:
        assert self.q is not None and self.dedup is not None
        datas = [payload(seed + i, n) for i, n in enumerate(sizes_)]
        batch_keys = [k if self._key_allowed(k) else None for k in ks[: len(datas)]]
        if delay_ms is not None and not self._delay_allowed():
            delay_ms = None
        kw: dict[str, Any] = {"keys": batch_keys, "headers": hdrs}
        if ttl_ms is not None:
            kw["ttl"] = ttl_ms / 1000
        if delay_ms is not None:
            kw["delay"] = delay_ms / 1000
        got = self.q.put_many(datas, **kw)
        assert len(got) == len(datas)
        for item_id, data, key in zip(got, datas, batch_keys):
            first, sure = self.dedup.lookup(key, self.clock.ms)
            if first is not None and (sure or item_id == first):
                assert item_id == first, f"key {key!r} within the window: id {item_id}, want {first}"
                continue
            self._store(item_id, data, key, hdrs, ttl_ms, self._nb_ms(delay_ms, False))

    @precondition(lambda self: not KNOWN_BUG_1_ZERO_CRC_WINDOW)
    @rule(size=st.integers(0, 120))
    def put_zero_crc(self, size: int) -> None:
        """A plain put whose record's first byte (the low byte of its CRC) is 0x00, where the
        active file has room for it: the record a read window may end 1-8 bytes into."""
        assert self.q is not None
        jf = self.q.journal.files[-1]
        offset, salt = jf.size, jf.header.salt
        data = payload(0, size)
        if offset + 33 + size <= self.journal_size:
            for variant in range(1024):
                cand = payload(variant, size) + variant.to_bytes(2, "little")
                rec = record.encode_put(salt, offset, self.next_id, self.clock.ms, 0, cand)
                if rec[0] == 0:
                    data = cand
                    self.zero_crc_puts += 1
                    break
        self._store(self.q.put(data), data, None, None, None, None)

    # ------------------------------------------------------------------ consuming
    def _reader(self, data: st.DataObject) -> tuple[str, ReaderModel]:
        name = data.draw(st.sampled_from(NAMES), label="reader")
        return name, self.readers[name]

    def _point1(self) -> None:
        """While KNOWN_BUG_1 stands: ids a reader logged as lost to (non-existent) damage are gone."""
        while self.damage.lost:
            name, first, last = self.damage.lost.pop()
            if not KNOWN_BUG_1_ZERO_CRC_WINDOW:
                raise Refused(f"{name}: ids {first}..{last} lost to journal damage on a clean journal")
            m = self.readers[name]
            for i in range(first, last + 1):
                if i not in m.gone:
                    m.gone.add(i)
                    self.point1_losses += 1
                    POINT1_LOSSES[0] += 1

    def _deliver(self, m: ReaderModel, item) -> None:
        self._point1()
        if KNOWN_BUG_5_NOT_BEFORE_ORDER and item.id in self.items and self.items[item.id].not_before_ms:
            # the fresh order is not checked for a due not-before item: let it through if due
            spec = self.items[item.id]
            allowed, _ = m.candidates(self.items, self.clock.ms)
            if item.id not in allowed and spec.due(self.clock.ms) and item.id in m.fresh(self.items):
                m.maybe.add(item.id)  # tolerated, then recorded as a delivery like any other
                self.items_nb_tolerated = getattr(self, "items_nb_tolerated", 0) + 1
                saved = set(m.gone)
                _force_delivery(m, item, self.items, self.clock.ms)
                m.gone = saved
                return
        m.check_delivery(item, self.items, self.clock.ms)

    @rule(data=st.data(), n=st.integers(1, 5))
    def get(self, data: st.DataObject, n: int) -> None:
        name, m = self._reader(data)
        assert self.q is not None
        r = self.q.reader(name)
        for _ in range(n):
            try:
                item = r.get(block=False)
            except Empty:
                self._point1()
                if m.due_now(self.items, self.clock.ms):
                    allowed, _ = m.candidates(self.items, self.clock.ms)
                    raise Refused(f"{name}: Empty, but due now: {sorted(allowed)} (lost?)") from None
                return
            self._deliver(m, item)

    @rule(data=st.data(), n=st.integers(1, 6))
    def get_many(self, data: st.DataObject, n: int) -> None:
        name, m = self._reader(data)
        assert self.q is not None
        try:
            batch = self.q.reader(name).get_many(n, block=False)
        except Empty:
            self._point1()
            due = m.due_now(self.items, self.clock.ms)
            assert not due, f"{name}: get_many Empty while due"
            return
        for item in batch:
            self._deliver(m, item)

    def _open_reader(self, data: st.DataObject) -> tuple[str, ReaderModel, int]:
        name = data.draw(st.sampled_from(sorted(n for n, m in self.readers.items() if m.open)), label="r")
        m = self.readers[name]
        return name, m, data.draw(st.sampled_from(sorted(m.open)), label="id")

    def _has_open(self) -> bool:
        return any(m.open for m in self.readers.values())

    @precondition(_has_open)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        name, m, i = self._open_reader(data)
        assert self.q is not None
        self.q.reader(name).commit(m.open[i].handle)
        m.commit(i)

    @precondition(_has_open)
    @rule(data=st.data())
    def commit_many(self, data: st.DataObject) -> None:
        name, m, _ = self._open_reader(data)
        ids = data.draw(st.lists(st.sampled_from(sorted(m.open)), min_size=1, unique=True), label="ids")
        assert self.q is not None
        self.q.reader(name).commit_many([m.open[i].handle for i in ids])
        for i in ids:
            m.commit(i)

    @precondition(_has_open)
    @rule(data=st.data(), delay_ms=st.one_of(st.none(), st.just(0), delays))
    def abort(self, data: st.DataObject, delay_ms: int | None) -> None:
        name, m, i = self._open_reader(data)
        assert self.q is not None
        busy = m.key_busy(i, self.items)
        self.q.reader(name).abort(m.open[i].handle, None if delay_ms is None else delay_ms / 1000)
        if m.abort(i, delay_ms, self.clock.ms, busy) == "dead" and m.dead_letter is not None:
            self.expected_dead.append((name, i, m.dead_letter))

    @precondition(_has_open)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        name, m, i = self._open_reader(data)
        assert self.q is not None
        busy = m.key_busy(i, self.items)
        self.q.reader(name).release(m.open[i].handle)
        m.release(i, busy)

    @precondition(_has_open)
    @rule(data=st.data())
    def reject(self, data: st.DataObject) -> None:
        name, m, i = self._open_reader(data)
        assert self.q is not None
        self.q.reader(name).reject(m.open[i].handle, reason="model")
        if m.dead_letter is not None:
            self.expected_dead.append((name, i, m.dead_letter))
        m.reject(i)

    @precondition(_has_open)
    @rule(data=st.data())
    def stale_handle_is_refused(self, data: st.DataObject) -> None:
        """A handle whose read was given back cannot settle the next delivery of that id."""
        name, m, i = self._open_reader(data)
        assert self.q is not None
        r = self.q.reader(name)
        old = m.open[i].handle
        busy = m.key_busy(i, self.items)
        r.release(old)
        m.release(i, busy)
        try:
            r.commit(old)
        except UnknownRead:
            pass
        else:
            raise Refused(f"{name}: a released handle of id {i} committed")

    # ------------------------------------------------------------------ time, config, position
    @rule(ms=st.one_of(st.integers(1, 3 * TICK_MS), st.sampled_from([1000, 2500])))
    def advance_clock(self, ms: int) -> None:
        self.clock.advance(ms)

    @rule(data=st.data(), mem=mems)
    def set_max_memory(self, data: st.DataObject, mem: int) -> None:
        name, _ = self._reader(data)
        assert self.q is not None
        self.q.set_reader_settings(name, {"max_memory": mem})

    @rule(data=st.data(), max_errors=st.one_of(st.none(), st.integers(1, 4)))
    def set_max_errors(self, data: st.DataObject, max_errors: int | None) -> None:
        name, m = self._reader(data)
        assert self.q is not None
        self.q.set_reader_settings(name, {"max_errors": max_errors})
        if m.max_errors is not None:
            # likewise an item that reached the old limit after it was set (a read open then,
            # given back by a release or a reopen with its count): a take may have met it and
            # dead-lettered it already, which raising the limit does not undo
            m.doomed |= {i for i, (_, hi) in m.errors.items() if hi >= m.max_errors and i not in m.open}
        m.max_errors = max_errors
        if max_errors is not None:
            # an item whose error count reached the new limit is dead-lettered when a take meets
            # it (design.md, "Poison items"), which the model cannot time: from now on it may be
            # gone, even if the limit is raised again before a take met it
            m.doomed |= {i for i, (_, hi) in m.errors.items() if hi >= max_errors and i not in m.open}

    @rule(data=st.data(), on=st.booleans())
    def set_key_order(self, data: st.DataObject, on: bool) -> None:
        """Key order on or off, live (issue 39): checked at every delivery from now on."""
        name, m = self._reader(data)
        assert self.q is not None
        self.q.set_reader_settings(name, {"key_order": on})
        m.set_key_order(on, self.items)

    @rule(data=st.data(), where=st.sampled_from([None, "dlq", "self"]))
    def set_dead_letter(self, data: st.DataObject, where: str | None) -> None:
        if where == "self" and KNOWN_BUG_7_SELF_DEAD_LETTER:
            where = "dlq"
        name, m = self._reader(data)
        assert self.q is not None
        self._flush_policies()  # disposals already under way go where they were bound
        sink = {None: None, "dlq": self.dlq, "self": self.q}[where]
        self.q.set_reader_settings(name, {"dead_letter": sink})
        m.dead_letter = where

    @rule(data=st.data(), where=st.one_of(st.sampled_from(["earliest", "latest"]), st.integers(0, 400)))
    def seek(self, data: st.DataObject, where: Any) -> None:
        name, m = self._reader(data)
        assert self.q is not None
        self._flush_policies()
        first, end = self.q.journal.files[0].first_id, self.q.stats().next_id
        head = self.q.reader(name).seek(where)
        want = {"earliest": first, "latest": end}.get(where) if isinstance(where, str) else None
        if want is None:
            want = min(max(where, first), end)
        assert head == want, f"{name}: seek({where!r}) put the head at {head}, want {want}"
        m.sought(head, self.items)
        # a seek is durable at the next checkpoint (Reader.seek): take it now, so a crash later
        # has one reader state to come back to
        self.checkpoint()

    @rule()
    def checkpoint(self) -> None:
        assert self.q is not None
        self._flush_policies()
        self.q.checkpoint()
        for m in self.readers.values():
            m.checkpointed()

    @rule()
    def archive(self) -> None:
        assert self.q is not None
        if KNOWN_BUG_4_RETENTION_DONE and self.retention and self._done_above_head():
            return
        if self.retention and self._has_open():
            return  # what becomes of an open read whose file retention drops is not promised
        self.q.archive()

    def _done_above_head(self) -> bool:
        assert self.q is not None
        return any(self.q.reader(n).done or m.errors for n, m in self.readers.items())

    # ------------------------------------------------------------------ close, reopen, crash
    @rule(
        retention=st.sampled_from([{}, {}, {"retention_bytes": 1500}, {"retention_age": 2.0}]),
        compression=st.sampled_from([None, None, "zstd", "none"]),
    )
    def reopen(self, retention: dict[str, Any], compression: str | None = None) -> None:
        """Closed and opened again, maybe switching compression for new writes (None keeps it):
        the journal then holds compressed and plain records side by side."""
        assert self.q is not None
        self.compression = compression
        self._flush_policies()
        self.q.close()
        for m in self.readers.values():
            m.reopened(crashed=False)
        self._reopen(retention)

    @rule()
    def crash(self) -> None:
        """The directory as it stands on disk while the queue is open, then opened again."""
        assert self.q is not None
        self._flush_policies()
        snap = self.path + ".crash"
        shutil.copytree(self.path, snap, ignore=shutil.ignore_patterns(".journaled.lock", ".journaled.sock"))
        self.q.close()  # the old owner's last words land in a directory about to be replaced
        shutil.rmtree(self.path)
        os.rename(snap, self.path)
        for m in self.readers.values():
            m.reopened(crashed=True)
        self._reopen(self.retention)

    def _reopen(self, retention: dict[str, Any]) -> None:
        if KNOWN_BUG_4_RETENTION_DONE and retention and self._model_done_above_head():
            retention = {}
        # the limits are stored with the queue (F-36): -1 removes one, a number sets it
        self.retention = retention
        self.q = JournaledQueue(self.path, self._qconfig(), name="q")
        assert sorted(self.q.readers()) == sorted(self.readers)
        for name in self.readers:
            self.q.reader(name)
        self._open_baseline()

    def _model_done_above_head(self) -> bool:
        """Some reader has settled ids above an unsettled one, or error counts (issue 34 point 4)."""
        return any(
            m.errors or any(i in m.gone for i in self.items if i > self._head_floor(m))
            for m in self.readers.values()
        )

    def _head_floor(self, m: ReaderModel) -> int:
        pending = [i for i in self.items if i >= m.start and i not in m.gone]
        return min(pending) if pending else self.next_id

    def _first_files_id(self) -> int | None:
        if self.q is None or self.q.closed:
            return None
        return self.q.journal.files[0].first_id

    # ------------------------------------------------------------------ after every step
    def _flush_policies(self) -> None:
        """Hand every disposal under way to its destination now (the background thread would)."""
        assert self.q is not None
        self.q.run_policies()

    def _learn_new_ids(self) -> None:
        """Ids the queue holds beyond the model's: dead-letter envelopes put into the queue itself."""
        assert self.q is not None
        end = self.q.stats().next_id
        if end > self.next_id:
            assert any(m.dead_letter == "self" for m in self.readers.values()), (
                f"ids {self.next_id}..{end - 1} appeared with no put and no dead letter into the queue"
            )
            for i in range(self.next_id, end):
                self.items[i] = Spec(i, None, self.clock.ms, envelope=True)
            self.next_id = end

    def _retention_check(self) -> None:
        assert self.q is not None
        keep = self.q.journal.files[0].first_id
        for name, m in self.readers.items():
            lo, hi = m.retention_moved(keep, self.items, self.clock.ms)
            if lo and not self.retention:
                raise Refused(f"{name}: archiving removed ids below {keep} the reader still needs")
            a, b = self.lost_range[name]
            self.lost_range[name] = (a + lo, b + hi)
        if keep > 1:
            assert self.dedup is not None
            for key, (item_id, _) in self.dedup.keys.items():
                if item_id < keep:
                    self.archived_keys.add(key)

    def _drain_dlq(self) -> None:
        assert self.dlq is not None
        r = self.dlq.reader("ops")
        while True:
            try:
                item = r.get(block=False)
            except Empty:
                break
            self.seen_dead["dlq"].append(DeadLetter.decode(item.data))
            r.commit(item)

    @invariant()
    def promises_hold(self) -> None:
        if self.q is None:
            return
        self._flush_policies()
        self._point1()  # a refill or a sweep may have read behind (and met point 1) at any step
        self._learn_new_ids()
        self._retention_check()
        self._drain_dlq()
        qs = self.q.stats()
        assert qs.health.ok, f"queue not healthy: {qs.health}"
        for rs in qs.readers:
            m = self.readers[rs.name]
            r = self.q.reader(rs.name)
            for i in range(m.start, min(r.head, self.next_id)):
                pending = i not in m.gone and i in self.items
                settled_ok = (
                    i in m.maybe or i in m.doomed or self.items[i].expired(self.clock.ms)
                    if i in self.items
                    else True
                )
                if pending and not settled_ok and i not in self._may_be_dead(m):
                    raise Refused(f"{rs.name}: head {r.head} passed id {i}, which is not settled")
            assert rs.open_reads == len(m.open), f"{rs.name}: open_reads {rs.open_reads}, model {len(m.open)}"
            base = self.baseline.get(rs.name)
            if base is not None:
                assert rs.committed - base.committed == m.committed, (
                    f"{rs.name}: committed {rs.committed - base.committed} since open, model {m.committed}"
                )
                assert rs.rejected - base.rejected == m.rejected, f"{rs.name}: rejected {rs.rejected}"
                assert rs.dead_lettered - base.dead_lettered >= m.dead_lettered, f"{rs.name}: dead_lettered"
                lo, hi = self.lost_range[rs.name]
                lost = rs.items_lost_to_retention - base.items_lost_to_retention
                assert lo <= lost <= hi, f"{rs.name}: items_lost_to_retention {lost}, model {lo}..{hi}"
        self._check_dead_letters()

    def _may_be_dead(self, m: ReaderModel) -> set[int]:
        if m.max_errors is None:
            return set()
        return {i for i, (_, hi) in m.errors.items() if hi >= m.max_errors}

    def _check_dead_letters(self) -> None:
        seen = {(d.reader, d.id) for d in self.seen_dead["dlq"]}
        for d in self.seen_dead["dlq"]:
            spec = self.items.get(d.id)
            assert spec is not None and (spec.envelope or d.data == spec.data), f"dead letter {d.id} payload"
        for name, i, where in self.expected_dead:
            if where == "dlq":
                assert (name, i) in seen, f"{name}: dead letter of id {i} missing from its queue"


def _force_delivery(m: ReaderModel, item, items, now_ms: int) -> None:
    """Record a delivery the KNOWN_BUG_5 switch tolerates (metadata and error count still checked)."""
    from support.queuemodel import Open, check_metadata

    lo, hi = m.error_range(item.id)
    if not lo <= item.error_count <= hi:
        raise Refused(f"{m.name}: id {item.id} error_count {item.error_count}, want {lo}..{hi}")
    check_metadata(m.name, item, items[item.id])
    m.maybe.discard(item.id)
    m.errors[item.id] = (item.error_count, item.error_count)
    m.open[item.id] = Open(item, item.error_count)


QueueModelMachine.TestCase.settings = settings(
    # CI's size (about a minute each, compiled and pure): a fixed set of examples, so CI is
    # stable; scripts/soak_model.py explores with fresh seeds.  The variables override it.
    max_examples=int(os.environ.get("JOURNALED_MODEL_EXAMPLES", "300")),
    stateful_step_count=int(os.environ.get("JOURNALED_MODEL_STEPS", "60")),
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)
TestQueueModel = QueueModelMachine.TestCase
