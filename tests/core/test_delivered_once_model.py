"""A model of one reader's promises while not-before parking, retries with a delay, read-behind
and live ``max_memory`` changes interleave (issue 34, points 2 and 5): every ``get`` hands out the
smallest id that is due, not committed, not open and not waiting out a retry delay, and
``Empty`` only when there is none, so no item is delivered twice and none is skipped.  Reads
given back without a delay (``release``, ``abort``) are left out: they go back to the head as a
stack, ahead of the id order, by design.  Time is a fake clock.
"""

from __future__ import annotations

import math
import shutil
import tempfile

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, stats
from journaled.core import retry
from support.clock import FakeClock

MEMORY = (1024, 2048, 4096, 1 << 20)


class OneReader(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        self.clock.wall = float(math.ceil(self.clock.wall))  # not-befores are whole milliseconds
        # the queue's cores are given the clock when they are made (retry.CLOCK); stats reads time
        self.saved = (retry.CLOCK, stats.time)
        retry.CLOCK, stats.time = self.clock, self.clock  # type: ignore[assignment]
        self.dir = tempfile.mkdtemp()
        self.q = JournaledQueue(self.dir + "/q", QueueConfig(sync="never", checkpoint_interval=3600.0))
        self.r = self.q.reader("r", ReaderConfig(max_memory=2048))
        self.due: dict[int, float] = {}  # id -> when it may be delivered (wall clock)
        self.open: dict[int, object] = {}
        self.aborts: dict[int, int] = {}
        self.committed: set[int] = set()

    def teardown(self) -> None:
        self.q.close()
        retry.CLOCK, stats.time = self.saved  # type: ignore[assignment]
        shutil.rmtree(self.dir, ignore_errors=True)

    def available(self) -> list[int]:
        now = self.clock.wall
        return sorted(
            i for i, t in self.due.items() if t <= now and i not in self.committed and i not in self.open
        )

    @rule(n=st.integers(1, 6), size=st.integers(0, 600))
    def put_now(self, n: int, size: int) -> None:
        for i in self.q.put_many([b"x" * size] * n):
            self.due[i] = self.clock.wall

    @rule(delay=st.integers(1, 4), size=st.integers(0, 600))
    def put_later(self, delay: int, size: int) -> None:
        i = self.q.put(b"y" * size, not_before=self.clock.wall + delay)  # the put reads the real clock
        self.due[i] = self.clock.wall + delay

    @rule(seconds=st.sampled_from([0.5, 1.0, 2.0]))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        if seconds > 1:
            self.q.run_policies()  # the background tick: due items go back before a get looks

    @rule(max_memory=st.sampled_from(MEMORY))
    def change_max_memory(self, max_memory: int) -> None:
        self.q.reader("r", ReaderConfig(max_memory=max_memory))

    @rule()
    def get(self) -> None:
        want = self.available()
        try:
            item = self.r.get(block=False)
        except Empty:
            assert want == [], f"Empty with {want} due"
            return
        assert want and item.id == want[0], f"delivered {item.id}, the smallest due is {want[:5]}"
        self.open[item.id] = item

    @precondition(lambda self: self.open)
    @rule(data=st.data())
    def commit(self, data: st.DataObject) -> None:
        i = data.draw(st.sampled_from(sorted(self.open)))
        self.r.commit(self.open.pop(i))
        self.committed.add(i)

    @precondition(lambda self: any(self.aborts.get(i, 0) < 2 for i in self.open))
    @rule(data=st.data(), delay=st.integers(1, 3))
    def abort_with_a_delay(self, data: st.DataObject, delay: int) -> None:
        i = data.draw(st.sampled_from(sorted(i for i in self.open if self.aborts.get(i, 0) < 2)))
        self.r.abort(self.open.pop(i), delay=float(delay))  # under FREE_RETRIES: no floor
        self.aborts[i] = self.aborts.get(i, 0) + 1
        self.due[i] = self.clock.wall + delay

    @invariant()
    def the_backlog_is_what_is_not_committed(self) -> None:
        assert self.r.stats().backlog_items == len(self.due) - len(self.committed)


TestOneReader = OneReader.TestCase
TestOneReader.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None, suppress_health_check=list(HealthCheck)
)
