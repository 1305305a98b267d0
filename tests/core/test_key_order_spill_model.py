"""Key order under memory pressure, as a state machine (issue 39 point 1; docs/design.md, "Key
order"): one ``key_order`` reader with a tiny ``max_memory`` (so most items behind a busy key are
spilled and read back), driven through puts, gets, commits, aborts with and without a delay,
releases, rejects, ``max_memory`` changed live, key order switched off and on, and a crash, against
a plain model: for each key its smallest unsettled id is the only one that may go out, never
while another of the key is open.  Checked at every step: no item of a key out of turn, none
delivered while it is settled, every ``Empty`` with nothing deliverable, the items held in memory
behind busy keys within their bound, ``items_behind_keys`` what the core holds.  At the end every
item is settled exactly once.  The whole-queue model (tests/whole/test_queue_model.py) covers key
order with every other feature; this one makes spilling the common case.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from conftest import SHM
from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.core import keyorder, retry
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0, journal_size=2000)
KEYS = [b"a", b"b", b"c", None]


class SpillMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # tmpfs when there is one (as the whole-queue model): what is checked is the order items
        # go out in and that each is settled once, never what the disk does; a journal_size of
        # 2,000 bytes makes a file per few puts, and creating, renaming and truncating them on
        # ext4 took three quarters of this test's time.
        self.root = tempfile.mkdtemp(prefix="spillmodel", dir=SHM)
        self.path = os.path.join(self.root, "q")
        self.clock = FakeClock()
        self.saved_clock, retry.CLOCK = retry.CLOCK, self.clock
        self.q: JournaledQueue | None = None
        self.key: dict[int, bytes | None] = {}  # every id put, with its key
        self.settled: set[int] = set()  # committed or rejected (checkpointed at each crash)
        self.open: dict[int, object] = {}  # id -> the Item handed out
        self.delayed: set[int] = set()  # aborted: perhaps not due (a delay, the floor) until the clock moves
        self.ordered = True

    @initialize(mem=st.sampled_from([1, 300, 1200, 4000]))
    def start(self, mem: int) -> None:
        self.q = JournaledQueue(self.path, FAST)
        self.q.reader("r", ReaderConfig(key_order=True, max_memory=mem))

    def teardown(self) -> None:
        try:
            if self.q is not None and not self.q.closed:
                self.q.close()
        finally:
            retry.CLOCK = self.saved_clock
            shutil.rmtree(self.root, ignore_errors=True)

    @property
    def r(self):
        assert self.q is not None
        return self.q.reader("r")

    # ------------------------------------------------------------------ the model
    def _first_of(self, key: bytes) -> int | None:
        waiting = [i for i, k in self.key.items() if k == key and i not in self.settled]
        return min(waiting) if waiting else None

    def _may_go(self, i: int, due: bool = False) -> bool:
        """May ``i`` be delivered now (``due``: must it be, so no Empty: not perhaps delayed)?"""
        if i in self.settled or i in self.open or (due and i in self.delayed):
            return False
        k = self.key[i]
        if k is None or not self.ordered:
            return True
        return self._first_of(k) == i and not any(self.key[o] == k for o in self.open)

    # ------------------------------------------------------------------ rules
    @rule(ks=st.lists(st.sampled_from(KEYS), min_size=1, max_size=12), size=st.integers(0, 60))
    def put_many(self, ks: list[bytes | None], size: int) -> None:
        assert self.q is not None
        ids = self.q.put_many([b"%d" % n * size for n in range(len(ks))], keys=ks)
        self.key.update(zip(ids, ks))

    @rule(n=st.integers(1, 8))
    def get(self, n: int) -> None:
        for _ in range(n):
            try:
                item = self.r.get(block=False)
            except Empty:
                due = [i for i in self.key if self._may_go(i, due=True)]
                assert not due, f"Empty, but {due} may go (spilled and never read back?)"
                return
            assert self._may_go(item.id), f"{item.id} (key {item.key}) delivered out of turn"
            assert item.key == self.key[item.id]
            self.open[item.id] = item
            self.delayed.discard(item.id)

    def _pick(self, data: st.DataObject) -> int:
        return data.draw(st.sampled_from(sorted(self.open)))

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        i = self._pick(data)
        self.r.commit(self.open.pop(i))
        self.settled.add(i)

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def reject(self, data: st.DataObject) -> None:
        i = self._pick(data)
        self.r.reject(self.open.pop(i), reason="model")
        self.settled.add(i)

    @precondition(lambda self: self.open)
    @rule(data=st.data(), delay=st.sampled_from([None, 0.0, 5.0]), release=st.booleans())
    def abort(self, data: st.DataObject, delay: float | None, release: bool) -> None:
        i = self._pick(data)
        if release:
            self.r.release(self.open.pop(i))
            return
        self.r.abort(self.open.pop(i), delay=delay)
        self.delayed.add(i)  # a delay or the retry floor: due once the clock has moved on

    @rule()
    def time_passes(self) -> None:
        self.clock.advance(60)
        assert self.q is not None
        self.q.run_policies()
        self.delayed.clear()

    @rule(mem=st.sampled_from([1, 300, 1200, 4000, 1 << 20]))
    def set_max_memory(self, mem: int) -> None:
        assert self.q is not None
        self.q.set_reader_settings("r", {"max_memory": mem})

    @rule(on=st.booleans())
    def set_key_order(self, on: bool) -> None:
        assert self.q is not None
        self.q.set_reader_settings("r", {"key_order": on})
        self.ordered = on

    @rule()
    def crash(self) -> None:
        assert self.q is not None
        self.q.checkpoint()  # what is settled stays settled; what is open comes back
        snap = self.path + ".crash"
        shutil.copytree(self.path, snap, ignore=shutil.ignore_patterns(".journaled.lock", ".journaled.sock"))
        self.q.close()
        shutil.rmtree(self.path)
        os.rename(snap, self.path)
        self.q = JournaledQueue(self.path, FAST)
        self.open.clear()

    # ------------------------------------------------------------------ invariants
    @invariant()
    def lines_within_their_share(self) -> None:
        if self.q is None:
            return
        keys = self.r.core.keys
        if keys is not None:
            assert keys.charge() <= keyorder.line_limit(self.r.config), "the lines took more than their share"
            assert self.r.stats().items_behind_keys == keys.count

    def check_all_settled_once(self) -> None:
        """Commit everything that comes (the clock moving on): every id is settled exactly once."""
        for i, it in list(self.open.items()):
            self.r.commit(it)
            self.settled.add(i)
        self.open.clear()
        self.clock.advance(3600)
        self.delayed.clear()
        while True:
            try:
                item = self.r.get(block=False)
            except Empty:
                break
            assert item.id not in self.settled, f"{item.id} delivered after it was settled"
            self.r.commit(item)
            self.settled.add(item.id)
        assert self.settled == set(self.key), f"never delivered: {sorted(set(self.key) - self.settled)}"


class SpillMachineToTheEnd(SpillMachine):
    def teardown(self) -> None:
        try:
            if self.q is not None:
                self.check_all_settled_once()
        finally:
            super().teardown()


SpillMachineToTheEnd.TestCase.settings = settings(
    max_examples=int(os.environ.get("JOURNALED_SPILL_EXAMPLES", "150")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestSpillModel = SpillMachineToTheEnd.TestCase
