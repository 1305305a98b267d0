"""A poison item cannot melt a core: the built-in retry floor, and the health flag.

With default settings (no ``retry_delay``) an item aborted again and again goes back at once only
for its first ``FREE_RETRIES`` failures, then waits out :func:`journaled.core.retry.floor`, so it
is retried at a bounded rate and the items behind it are delivered meanwhile; a reader whose head
item failed more than ``POISON_ERRORS`` times is flagged in ``stats()`` until the item is
committed or dead-lettered (issue 22, point 7).
"""

from __future__ import annotations

import math
import subprocess
import sys
import time

import pytest

from journaled import DeadLetter, Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.core import retry
from journaled.core.retry import FREE_RETRIES, RETRY_FLOOR, RETRY_FLOOR_MAX
from journaled.stats import POISON_ERRORS, PoisonItem
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(retry, "CLOCK", c)  # the cores of queues opened from now on run on it
    return c


# ----------------------------------------------------------------------------- the rule
def test_the_floor_is_none_for_the_first_aborts_then_doubles_up_to_its_cap():
    assert [retry.floor(n) for n in range(FREE_RETRIES + 1)] == [0.0] * (FREE_RETRIES + 1)
    floors = [retry.floor(FREE_RETRIES + k) for k in range(1, 8)]
    assert floors == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert floors[0] == RETRY_FLOOR and floors[-1] == RETRY_FLOOR_MAX
    assert retry.floor(10**9) == RETRY_FLOOR_MAX  # no overflow for an item that failed forever


def test_the_floor_never_lowers_what_the_reader_or_the_abort_asks(clock):
    t0 = clock.monotonic()
    slow = ReaderConfig(retry_delay=2.0, retry_delay_max=30.0)
    for n in range(1, 12):
        assert retry.due_time(slow, n, None, t0) == t0 + max(retry.backoff(slow, n), retry.floor(n))
        assert retry.due_time(slow, n, None, t0) >= t0 + retry.backoff(slow, n)
        assert retry.due_time(ReaderConfig(), n, 7.0, t0) == t0 + 7.0  # an explicit delay above it
    fast = ReaderConfig(retry_delay=0.001, retry_delay_max=0.001)
    n = FREE_RETRIES + 3
    assert retry.due_time(fast, n, None, t0) == t0 + retry.floor(n)
    assert retry.due_time(ReaderConfig(), n, 0.0, t0) == t0 + retry.floor(n)  # delay=0 too
    assert retry.due_time(ReaderConfig(), FREE_RETRIES, 0.0, t0) is None  # at once, as before


# ----------------------------------------------------------------------------- delivery
def test_the_first_aborts_redeliver_at_once_then_the_item_waits_and_the_next_goes_first(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put_many([b"poison", b"next"])
        for _ in range(FREE_RETRIES):
            item = r.get(block=False)
            assert item.data == b"poison"
            r.abort(item)
        item = r.get(block=False)
        assert (item.data, item.error_count) == (b"poison", FREE_RETRIES)
        r.abort(item)  # its FREE_RETRIES + 1-th failure: parked for the floor
        assert r.stats().items_delayed == 1
        nxt = r.get(block=False)
        assert nxt.data == b"next"
        r.commit(nxt)
        with pytest.raises(Empty):
            r.get(block=False)
        clock.advance(RETRY_FLOOR * 0.9)
        with pytest.raises(Empty):
            r.get(block=False)
        clock.advance(RETRY_FLOOR * 0.2)
        back = r.get(block=False)
        assert (back.data, back.error_count) == (b"poison", FREE_RETRIES + 1)
        r.commit(back)
        assert r.stats().backlog_items == 0


def test_a_poison_item_aborted_in_a_tight_loop_for_a_second_is_delivered_a_bounded_number_of_times(
    tmp_path,
):
    seconds, jobs = 1.0, 200
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("workers")  # defaults: no retry_delay, no max_errors
        q.put(b"poison")
        q.put_many([b"job %d" % i for i in range(jobs)])
        poison = done = 0
        start = time.monotonic()
        # a second at least, and on until the jobs are done (a loaded machine never fails this)
        while (elapsed := time.monotonic() - start) < seconds or (done < jobs and elapsed < 30):
            try:
                item = r.get(timeout=0.01)
            except Empty:
                continue
            if item.data == b"poison":
                poison += 1
                r.abort(item)
            else:
                done += 1
                r.commit(item)
        elapsed = time.monotonic() - start
        # every delivery after the first FREE_RETRIES + 1 follows a wait of at least RETRY_FLOOR
        bound = 1 + FREE_RETRIES + math.ceil(elapsed / RETRY_FLOOR)
        assert FREE_RETRIES + 2 <= poison <= bound, (poison, elapsed)
        assert done == jobs  # nothing behind it was held back
        st = r.stats()
        assert (st.committed, st.backlog_items, st.aborted) == (jobs, 1, poison)


# ----------------------------------------------------------------------------- health
def fail(r, clock, times: int) -> None:
    """Deliver and abort the head item ``times`` times, waiting out each delay on ``clock``."""
    for _ in range(times):
        r.abort(r.get(block=False))
        clock.advance(RETRY_FLOOR_MAX)


def test_health_flags_a_reader_whose_head_item_failed_more_than_n_times_until_it_is_committed(
    tmp_path, clock
):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.reader("other")
        first = q.put(b"poison")
        q.put(b"fine")
        fail(r, clock, POISON_ERRORS)
        assert r.stats().poison is None
        assert q.stats().health.ok and q.stats().health.poison_readers == ()
        r.abort(r.get(block=False))  # one more than POISON_ERRORS: flagged while it waits
        assert r.stats().items_delayed == 1
        assert r.stats().poison == PoisonItem(first, POISON_ERRORS + 1)
        st = q.stats()
        assert [x.poison for x in st.readers] == [None, PoisonItem(first, POISON_ERRORS + 1)]
        assert st.health.poison_readers == ("r",) and not st.health.ok
        assert st.health.poisoned is None  # not the queue's write poisoning
        clock.advance(RETRY_FLOOR_MAX)
        item = r.get(block=False)
        assert r.stats().poison == PoisonItem(first, POISON_ERRORS + 1)  # open: still flagged
        r.commit(item)
        assert r.stats().poison is None
        assert q.stats().health.ok and q.stats().health.poison_readers == ()


def test_the_flag_clears_once_the_item_is_dead_lettered_and_is_back_after_a_reopen(tmp_path, clock):
    d = str(tmp_path / "q")
    dead: list[DeadLetter] = []
    config = ReaderConfig(max_errors=POISON_ERRORS + 2, dead_letter=dead.append)
    with JournaledQueue(d, FAST) as q:
        r = q.reader("r", config)
        bad = q.put(b"bad")
        q.put(b"worse")
        fail(r, clock, POISON_ERRORS + 1)
        assert r.stats().poison == PoisonItem(bad, POISON_ERRORS + 1)
        r.abort(r.get(block=False))  # max_errors: bound for the sink, no longer flagged
        assert r.stats().poison is None and q.stats().health.ok
        q.run_policies()
        assert [x.id for x in dead] == [bad] and r.stats().poison is None
        worse = r.get(block=False)
        assert worse.data == b"worse"
        r.abort(worse)
        fail(r, clock, POISON_ERRORS)
        assert r.stats().poison == PoisonItem(worse.id, POISON_ERRORS + 1)
    with JournaledQueue(d, FAST) as q:  # error counts are in the checkpoint
        assert q.reader("r", config).stats().poison == PoisonItem(worse.id, POISON_ERRORS + 1)
        assert q.stats().health.poison_readers == ("r",)


def test_a_client_process_sees_the_owners_poison_flag_typed(tmp_path, clock):
    d = str(tmp_path / "q")
    with JournaledQueue(d, FAST) as q:
        r = q.reader("r")
        first = q.put(b"poison")
        fail(r, clock, POISON_ERRORS + 1)
        code = (
            "import sys; from journaled import JournaledQueue as Q\n"
            "q = Q(sys.argv[1]); st = q.stats(); q.close()\n"
            "print(repr(st.readers[0].poison), st.health.poison_readers, st.health.ok)\n"
        )
        child = subprocess.run([sys.executable, "-c", code, d], capture_output=True, text=True, timeout=120)
        assert child.returncode == 0, child.stderr
        assert child.stdout.split("\n")[0] == (
            f"PoisonItem(id={first}, error_count={POISON_ERRORS + 1}) ('r',) False"
        )
