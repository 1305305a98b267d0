"""A hypothesis state machine: 2-3 readers against a simple model of the delivery guarantees.

Rules interleave put, put_many, get, commit, abort, checkpoint+archive, reader churn, clean
close+reopen, and crash+reopen (the directory is copied as it stands on disk while the queue is
open; the old object is then dropped and the copy opened).  Journal files are tiny so rotation
and archiving happen all the time, and readers get tiny ``max_memory`` values so they read
behind from disk.

The model, per reader (what issue 3 promises):

* ``ready``: ids in the exact order they must be delivered: put order, aborted items pushed back
  at the head; after any reopen, every uncommitted id in id order.
* ``open``: delivered, neither committed nor aborted.
* a clean close+reopen brings back ``ready`` and ``open``, never a committed id;
* a crash additionally brings back the ids committed since the last checkpoint (exactly those:
  the background checkpoint interval is an hour, so only the rules write checkpoints), with the
  error counts that checkpoint recorded.
"""

from __future__ import annotations

import shutil
import tempfile

import attrs
import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import SHM
from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, UnknownRead
from journaled.core import retry
from journaled.disk import fileio

NAMES = ("r0", "r1", "r2")


class NoSyncOps(fileio.FileOps):
    """fsync is what makes this test slow on a busy disk, and it plays no part in it: a crash
    here is a copy of the directory, which sees the page cache, not the platters."""

    def fsync(self, fd: int) -> None:
        pass

    def fdatasync(self, fd: int) -> None:
        pass

    def fsync_dir(self, path: str) -> None:
        pass


payloads = st.binary(max_size=48)


@attrs.define
class Model:
    config: ReaderConfig
    ready: list[int] = attrs.field(factory=list)
    open: dict[int, int] = attrs.field(factory=dict)  # id -> error_count it was delivered with
    errors: dict[int, int] = attrs.field(factory=dict)  # uncommitted id -> abort count
    since_ckpt: set[int] = attrs.field(factory=set)  # committed since the last checkpoint
    ckpt_errors: dict[int, int] = attrs.field(factory=dict)  # error counts that checkpoint holds

    def checkpointed(self) -> None:
        self.since_ckpt = set()
        self.ckpt_errors = dict(self.errors)

    def reopened(self, crashed: bool) -> None:
        back = set(self.ready) | set(self.open)
        if crashed:
            back |= self.since_ckpt
            self.errors = {i: c for i, c in self.ckpt_errors.items() if i in back}
        self.ready = sorted(back)
        self.open = {}
        self.checkpointed()


class ReadersMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._ops = fileio.use(NoSyncOps())
        self._ops.__enter__()
        # The model has no delays: an abort puts the item back at the head at once.  The retry
        # floor (core/retry.py, tested in tests/core/test_poison.py) parks an item aborted more
        # than FREE_RETRIES times, so it is lifted past anything a run can reach here.
        self._free_retries = retry.FREE_RETRIES
        retry.FREE_RETRIES = 1 << 30
        self.root = tempfile.mkdtemp(
            prefix="journaled-stateful-", dir=SHM
        )  # tmpfs: on ext4, rename-over and truncate flush data
        self.generation = 0
        self.path = self._new_path()
        self.q: JournaledQueue | None = None
        self.models: dict[str, Model] = {}
        self.data: dict[int, bytes] = {}
        self.next_id = 1

    def _new_path(self) -> str:
        self.generation += 1
        return f"{self.root}/q{self.generation}"

    def _open(self) -> None:
        self.q = JournaledQueue(self.path, self.qconfig, name="q")
        assert self.q.readers() == sorted(self.models)
        for name, m in self.models.items():
            self.q.reader(name, m.config)  # configs are not stored: give them again

    def _config(self, mem: int) -> ReaderConfig:
        return ReaderConfig(max_memory=mem)

    @initialize(
        journal_size=st.sampled_from([180, 400, 1 << 20]),
        mems=st.lists(st.sampled_from([1, 60, 1 << 20]), min_size=2, max_size=3),
    )
    def start(self, journal_size: int, mems: list[int]) -> None:
        self.qconfig = QueueConfig(sync="never", journal_size=journal_size, checkpoint_interval=3600.0)
        self.q = JournaledQueue(self.path, self.qconfig, name="q")
        for name, mem in zip(NAMES, mems):
            cfg = self._config(mem)
            self.q.reader(name, cfg)
            self.models[name] = Model(cfg)

    def teardown(self) -> None:
        try:
            if self.q is not None:
                self.q.close()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self._ops.__exit__(None, None, None)
            retry.FREE_RETRIES = self._free_retries

    def reader(self, name: str):
        assert self.q is not None
        return self.q.reader(name)

    # ------------------------------------------------------------------ producing
    def _added(self, ids: list[int], datas: list[bytes]) -> None:
        assert ids == list(range(self.next_id, self.next_id + len(datas)))
        self.next_id += len(datas)
        for i, d in zip(ids, datas):
            self.data[i] = d
        for m in self.models.values():
            m.ready.extend(ids)

    @rule(data=payloads)
    def put(self, data: bytes) -> None:
        assert self.q is not None
        self._added([self.q.put(data)], [data])

    @rule(datas=st.lists(payloads, min_size=1, max_size=12))
    def put_many(self, datas: list[bytes]) -> None:
        assert self.q is not None
        self._added(self.q.put_many(datas), datas)

    @rule(datas=st.lists(payloads, min_size=1, max_size=12))
    def put_many_more(self, datas: list[bytes]) -> None:
        self.put_many(datas)  # a second rule: keep enough items flowing to rotate and archive

    # ------------------------------------------------------------------ consuming
    @rule(data=st.data(), n=st.integers(1, 6))
    def get(self, data: st.DataObject, n: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.models)), label="reader")
        m = self.models[name]
        r = self.reader(name)
        for _ in range(n):
            if not m.ready:
                try:
                    item = r.get(block=False)
                except Empty:
                    return
                raise AssertionError(f"{name}: got {item.id}, but nothing should be waiting")
            item = r.get(block=False)
            want = m.ready.pop(0)
            assert item.id == want, f"{name}: delivered {item.id}, expected {want}"
            assert item.data == self.data[want]
            assert item.error_count == m.errors.get(want, 0)
            m.open[want] = item.error_count

    @rule(data=st.data(), n=st.integers(1, 6))
    def get_more(self, data: st.DataObject, n: int) -> None:
        self.get(data, n)  # a second rule: consuming should be as common as producing

    @precondition(lambda self: any(m.open for m in self.models.values()))
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        name, m = self._draw_reader_with_open_reads(data)
        self._commit(name, m, data.draw(st.sampled_from(sorted(m.open)), label="id"))

    @precondition(lambda self: any(m.open for m in self.models.values()))
    @rule(data=st.data())
    def commit_newest(self, data: st.DataObject) -> None:
        """Out of order on purpose: what libkestrel forgets on replay."""
        name, m = self._draw_reader_with_open_reads(data)
        self._commit(name, m, max(m.open))

    def _draw_reader_with_open_reads(self, data: st.DataObject) -> tuple[str, Model]:
        name = data.draw(st.sampled_from(sorted(n for n, m in self.models.items() if m.open)))
        return name, self.models[name]

    def _commit(self, name: str, m: Model, item_id: int) -> None:
        self.reader(name).commit(item_id)
        del m.open[item_id]
        m.errors.pop(item_id, None)
        m.since_ckpt.add(item_id)

    @precondition(lambda self: any(m.open for m in self.models.values()))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        name, m = self._draw_reader_with_open_reads(data)
        item_id = data.draw(st.sampled_from(sorted(m.open)), label="id")
        self.reader(name).abort(item_id)
        count = m.open.pop(item_id) + 1
        m.errors[item_id] = count
        m.ready.insert(0, item_id)

    @rule(data=st.data(), bogus=st.integers(0, 80))
    def commit_or_abort_unknown(self, data: st.DataObject, bogus: int) -> None:
        name = data.draw(st.sampled_from(sorted(self.models)), label="reader")
        if bogus in self.models[name].open:
            return
        op = data.draw(st.sampled_from(["commit", "abort"]), label="op")
        try:
            getattr(self.reader(name), op)(bogus)
        except UnknownRead:
            pass
        else:
            raise AssertionError(f"{op}({bogus}) on {name} should raise UnknownRead")

    # ------------------------------------------------------------------ readers
    @precondition(lambda self: len(self.models) < 3)
    @rule(mem=st.sampled_from([1, 60, 1 << 20]))
    def add_reader(self, mem: int) -> None:
        assert self.q is not None
        name = next(n for n in NAMES if n not in self.models)
        cfg = self._config(mem)
        self.q.reader(name, ReaderConfig(start="latest", max_memory=mem))
        self.models[name] = Model(cfg)  # "latest": nothing waiting; its checkpoint is written

    @precondition(lambda self: len(self.models) > 2)
    @rule(data=st.data())
    def remove_reader(self, data: st.DataObject) -> None:
        assert self.q is not None
        name = data.draw(st.sampled_from(sorted(self.models)), label="reader")
        self.q.remove_reader(name)
        del self.models[name]

    # ------------------------------------------------------------------ durability
    @rule()
    def checkpoint_and_archive(self) -> None:
        assert self.q is not None
        self.q.checkpoint()
        self.q.archive()  # what the background thread does after a checkpoint
        for m in self.models.values():
            m.checkpointed()

    @rule(crash=st.booleans())
    def reopen(self, crash: bool) -> None:
        if crash:
            self.crash_and_reopen()
        else:
            self.close_and_reopen()

    def close_and_reopen(self) -> None:
        assert self.q is not None
        self.q.close()
        for m in self.models.values():
            m.reopened(crashed=False)
        self._open()

    def crash_and_reopen(self) -> None:
        assert self.q is not None
        dst = self._new_path()
        # what a crash at this instant leaves on disk; the background thread may archive a
        # journal file every reader passed while the copy runs, which leaves no instant's state
        # behind: then the copy is taken again
        for _ in range(50):
            try:
                shutil.copytree(self.path, dst, ignore=shutil.ignore_patterns(".journaled.sock"))
                break
            except shutil.Error:
                shutil.rmtree(dst, ignore_errors=True)
        else:
            raise AssertionError("no copy of the queue directory without a file vanishing mid-copy")
        self.q.close()  # releases threads and fds only: the copy never sees this close
        self.q = None
        shutil.rmtree(self.path)
        self.path = dst
        for m in self.models.values():
            m.reopened(crashed=True)
        self._open()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def counts_match_the_model(self) -> None:
        if self.q is None:
            return
        assert self.q.readers() == sorted(self.models)
        for name, m in self.models.items():
            s = self.reader(name).stats()
            assert s.open_reads == len(m.open), name
            assert s.items_waiting == len(m.ready), name


ReadersMachine.TestCase.settings = settings(
    max_examples=30,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestReaders = ReadersMachine.TestCase
