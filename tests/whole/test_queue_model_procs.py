"""The whole-queue model across processes (issue 34): a smaller, slower state machine in which
the test process is a client of an owner in another process (remote/), the owner is killed with
SIGKILL, the client takes the queue over, and a new owner process starts again.

The model is tests/support/queuemodel.py's, on the real clock (no delays or expiry here: the
other machine covers those with a model clock).  Promises checked (README, "Many processes, one
queue"): a client's acknowledged put survives the owner's kill -9 (it is at least in the OS when
``put`` returns); reads the dead owner had handed out are delivered again; commits made through
it since its last checkpoint may come back (never an uncommitted item lost); the order and the
error counts are the model's; after a takeover the same ids, and the new owner's stats agree.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import SHM
from journaled import Empty, JournaledQueue, OwnerLost, QueueConfig, UnknownRead
from journaled.disk.dirlock import owner_pid
from support.child import Child
from support.queuemodel import ReaderModel, Refused, Spec

OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
cfg = QueueConfig(sync="never", checkpoint_interval=3600.0, journal_size=600)
q = JournaledQueue(sys.argv[1], cfg, name="q")
for name in ("r0", "r1"):
    q.reader(name)
print("owner", flush=True)
sys.stdin.readline()
q.close()
"""

NAMES = ("r0", "r1")
CONFIG = QueueConfig(sync="never", checkpoint_interval=3600.0, journal_size=600)


def payload(seed: int, size: int) -> bytes:
    return ((seed % 65536).to_bytes(2, "little") * (size // 2 + 1))[:size]


class ProcsMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="journaled-model-procs-", dir=SHM)
        self.path = os.path.join(self.root, "q")
        self.owner: Child | None = None
        self.q: JournaledQueue | None = None
        self.items: dict[int, Spec] = {}
        self.readers = {n: ReaderModel(n, start=1) for n in NAMES}
        self.next_id = 1
        self.kills = 0

    # ------------------------------------------------------------------ processes
    def _start_owner(self) -> None:
        self.owner = Child(OWNER, self.path)
        self.owner.wait_for_line("owner")
        self.q = JournaledQueue(self.path, CONFIG, name="q")
        assert not self.q.is_owner, "the test process should be a client of the child"
        assert owner_pid(self.path) == self.owner.proc.pid

    @initialize()
    def start(self) -> None:
        self._start_owner()

    def teardown(self) -> None:
        try:
            if self.q is not None and not self.q.closed:
                self.q.close()
            if self.owner is not None and self.owner.proc.poll() is None:
                self.owner.kill()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def _owner_alive(self) -> bool:
        return self.owner is not None and self.owner.proc.poll() is None

    @precondition(_owner_alive)
    @rule()
    def kill_owner(self) -> None:
        """kill -9 of the owner: the next call of this process takes the queue over."""
        assert self.owner is not None
        self.owner.kill()
        self.kills += 1
        for m in self.readers.values():
            m.reopened(crashed=True)
        self._takeover()

    def _takeover(self) -> None:
        """Until this process owns the queue (its next call takes the directory over)."""
        assert self.q is not None
        for _ in range(200):
            try:
                self.q.stats()
            except OwnerLost:
                continue
            if self.q.is_owner:
                return
        raise AssertionError("no takeover after the owner died")

    @precondition(lambda self: not self._owner_alive())
    @rule()
    def new_owner_process(self) -> None:
        """This process (the owner since the takeover) closes; a new process owns the queue."""
        assert self.q is not None
        self.q.close()
        for m in self.readers.values():
            m.reopened(crashed=False)
        self._start_owner()

    # ------------------------------------------------------------------ producing, consuming
    def _store(self, ids: list[int], datas: list[bytes]) -> None:
        assert ids == list(range(self.next_id, self.next_id + len(datas))), (ids, self.next_id)
        for i, d in zip(ids, datas):
            self.items[i] = Spec(i, d, 0)
        self.next_id += len(datas)

    @rule(size=st.integers(0, 200), seed=st.integers(0, 65535))
    def put(self, size: int, seed: int) -> None:
        assert self.q is not None
        data = payload(seed, size)
        self._store([self.q.put(data)], [data])

    @rule(sizes=st.lists(st.integers(0, 120), min_size=1, max_size=6), seed=st.integers(0, 65535))
    def put_many(self, sizes: list[int], seed: int) -> None:
        assert self.q is not None
        datas = [payload(seed + i, n) for i, n in enumerate(sizes)]
        self._store(self.q.put_many(datas), datas)

    @rule(name=st.sampled_from(NAMES), n=st.integers(1, 4))
    def get(self, name: str, n: int) -> None:
        assert self.q is not None
        m = self.readers[name]
        r = self.q.reader(name)
        for _ in range(n):
            try:
                item = r.get(block=False)
            except Empty:
                if m.due_now(self.items, 0):
                    raise Refused(
                        f"{name}: Empty, but due: {sorted(m.candidates(self.items, 0)[0])}"
                    ) from None
                return
            m.check_delivery(_NoMeta(item), self.items, 0)
            m.open[item.id].handle = item  # the handle the reader settles by

    def _open(self, data: st.DataObject, few_errors: bool = False) -> tuple[str, ReaderModel, int] | None:
        choices = [
            (n, i)
            for n, m in self.readers.items()
            for i, o in m.open.items()
            if not few_errors or o.errors < 3  # past 3 aborts the retry floor delays on the real clock
        ]
        if not choices:
            return None
        name, i = data.draw(st.sampled_from(sorted(choices)), label="read")
        return name, self.readers[name], i

    @precondition(lambda self: any(m.open for m in self.readers.values()))
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        got = self._open(data)
        assert got is not None and self.q is not None
        name, m, i = got
        self.q.reader(name).commit(m.open[i].handle)
        m.commit(i)

    @precondition(lambda self: any(m.open for m in self.readers.values()))
    @rule(data=st.data())
    def abort(self, data: st.DataObject) -> None:
        got = self._open(data, few_errors=True)
        if got is None:
            return
        name, m, i = got
        assert self.q is not None
        self.q.reader(name).abort(m.open[i].handle)
        assert m.abort(i, None, 0) == "returned"

    @precondition(lambda self: any(m.open for m in self.readers.values()))
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        got = self._open(data)
        assert got is not None and self.q is not None
        name, m, i = got
        self.q.reader(name).release(m.open[i].handle)
        m.release(i)

    @precondition(lambda self: bool(self.kills) and any(m.open for m in self.readers.values()))
    @rule(data=st.data())
    def handle_of_a_dead_owner_is_refused(self, data: st.DataObject) -> None:
        """Reads are handed out again after a takeover: only the current handle settles one."""
        got = self._open(data)
        assert got is not None and self.q is not None
        name, m, i = got
        stale = m.open[i].handle
        self.q.reader(name).release(stale)
        m.release(i)
        try:
            self.q.reader(name).commit(stale)
        except UnknownRead:
            pass
        else:
            raise Refused(f"{name}: a released handle of id {i} committed")

    @invariant()
    def stats_agree(self) -> None:
        if self.q is None:
            return
        qs = self.q.stats()
        assert qs.next_id == self.next_id, f"next_id {qs.next_id}, model {self.next_id}"
        for rs in qs.readers:
            m = self.readers[rs.name]
            assert rs.open_reads == len(m.open), f"{rs.name}: open_reads {rs.open_reads}, model {len(m.open)}"


class _NoMeta:
    """A delivery seen through the model's metadata check: this machine puts plain items with no
    model clock, so the add time is not compared (the other machine compares it)."""

    def __init__(self, item) -> None:
        self._item = item

    def __getattr__(self, name: str):
        if name == "add_time":
            return 0.0
        return getattr(self._item, name)


ProcsMachine.TestCase.settings = settings(
    # CI's size (about a minute each, compiled and pure): a fixed set of examples, so CI is
    # stable; scripts/soak_model.py explores with fresh seeds.  The variables override it.
    max_examples=int(os.environ.get("JOURNALED_MODEL_PROCS_EXAMPLES", "15")),
    stateful_step_count=int(os.environ.get("JOURNALED_MODEL_PROCS_STEPS", "30")),
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestQueueModelProcs = ProcsMachine.TestCase
