"""Readers: blocking get, hand-off order, open reads (commit/abort), fan-out, start positions.

Specification tests for issue 3.  Threads synchronise through the reader's waiter queue (polled
with a generous deadline), never through sleeps.
"""

from __future__ import annotations

import os
import queue as stdlib_queue
import threading
import time
import types

import pytest

import journaled.reader
from conftest import ready_items
from journaled import (
    Empty,
    JournaledError,
    JournaledQueue,
    QueueClosed,
    QueueConfig,
    ReaderConfig,
    UnknownRead,
    UnknownReader,
)

DEADLINE = 60.0  # generous: the machine is shared and busy


def open_q(path: str, **kw: object) -> JournaledQueue:
    kw.setdefault("sync", "never")
    kw.setdefault("checkpoint_interval", 3600.0)
    return JournaledQueue(path, QueueConfig(**kw))  # type: ignore[arg-type]


def wait_until(pred, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not pred():
        if time.monotonic() > end:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.001)


def waiting(reader) -> int:
    with reader.core.lock:
        return len(reader.core.waiters)


class Getter(threading.Thread):
    """A thread doing one blocking get; records the item or the exception."""

    def __init__(self, reader, timeout: float | None = None) -> None:
        super().__init__(daemon=True)
        self.reader = reader
        self.timeout = timeout
        self.item = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.item = self.reader.get(timeout=self.timeout)
        except BaseException as exc:  # noqa: BLE001 - recorded for the test to inspect
            self.error = exc


def start_waiters(reader, n: int, timeout: float | None = None) -> list[Getter]:
    """Start ``n`` getters one after another, each known to be waiting before the next starts."""
    threads = []
    for k in range(n):
        t = Getter(reader, timeout)
        t.start()
        wait_until(lambda k=k: waiting(reader) == k + 1, f"getter {k} to wait")
        threads.append(t)
    return threads


def join_all(threads) -> None:
    for t in threads:
        t.join(DEADLINE)
        assert not t.is_alive()


def state(reader) -> tuple:
    """The parts of a reader's stats that commit/abort could change."""
    s = reader.stats()
    return (s.head, s.items_waiting, s.open_reads, s.delivered, s.committed, s.aborted)


def drain(reader) -> list:
    return list(ready_items(reader))


# ----------------------------------------------------------------------------- errors and types


def test_empty_is_a_stdlib_queue_empty_and_a_journaled_error(tmpfs_qdir):
    assert issubclass(Empty, stdlib_queue.Empty)
    assert issubclass(Empty, JournaledError)
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        with pytest.raises(stdlib_queue.Empty):
            r.get(block=False)


def test_negative_timeout_raises_value_error(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put(b"x")
        with pytest.raises(ValueError):
            r.get(timeout=-0.001)
        # the failed call opened nothing: the item is still there
        assert r.get(block=False).data == b"x"


def test_zero_timeout_returns_a_ready_item_or_raises_empty(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        with pytest.raises(Empty):
            r.get(timeout=0)
        q.put(b"x")
        assert r.get(timeout=0).data == b"x"


def test_nan_timeout_raises_value_error(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        with pytest.raises(ValueError):
            r.get(timeout=float("nan"))


def test_infinite_timeout_waits_like_none(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        (t,) = start_waiters(r, 1, timeout=float("inf"))
        q.put(b"x")
        join_all([t])
        assert t.error is None and t.item.data == b"x"


def test_huge_timeout_does_not_overflow(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        (t,) = start_waiters(r, 1, timeout=1e300)
        q.put(b"x")
        join_all([t])
        assert t.error is None and t.item.data == b"x"


# ----------------------------------------------------------------------------- blocking


def test_blocking_get_is_woken_by_a_put_from_another_thread(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        (t,) = start_waiters(r, 1)
        producer = threading.Thread(target=q.put, args=(b"hello",))
        producer.start()
        join_all([t, producer])
        assert t.error is None
        assert t.item.data == b"hello"


def test_blocking_get_is_woken_by_an_abort_from_another_thread(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put(b"x")
        held = r.get(block=False)
        (t,) = start_waiters(r, 1)
        r.abort(held)
        join_all([t])
        assert t.item.id == held.id and t.item.error_count == 1


def test_timed_out_get_raises_empty_after_at_least_the_timeout(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        t0 = time.monotonic()
        with pytest.raises(Empty):
            r.get(timeout=0.05)
        assert time.monotonic() - t0 >= 0.05
        assert waiting(r) == 0  # the timed-out waiter left the queue


class _Clock(types.ModuleType):
    """Stand-in for the ``time`` module as the reader sees it, with a controllable monotonic."""

    def __init__(self, monotonic) -> None:
        super().__init__("time")
        self.monotonic = monotonic

    def __getattr__(self, name: str):
        return getattr(time, name)


def test_timeout_deadline_is_taken_from_time_monotonic(tmpfs_qdir, monkeypatch):
    # A monotonic clock that jumps an hour per call: the first call fixes the deadline, the next
    # finds it passed, so a one-hour timeout expires at once -- proof the deadline is monotonic.
    calls = []

    def jumping() -> float:
        calls.append(1)
        return time.monotonic() + 3600.0 * len(calls)

    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        monkeypatch.setattr(journaled.reader, "time", _Clock(jumping))
        with pytest.raises(Empty):
            r.get(timeout=3000.0)
        assert len(calls) >= 2


def test_wall_clock_jumps_do_not_affect_timeouts(tmpfs_qdir, monkeypatch):
    clock = _Clock(time.monotonic)
    clock.time = lambda: 0.0  # wall clock stuck at the epoch
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        monkeypatch.setattr(journaled.reader, "time", clock)
        (t,) = start_waiters(r, 1, timeout=DEADLINE)
        q.put(b"x")
        join_all([t])
        assert t.error is None and t.item.data == b"x"


def test_close_wakes_every_waiter_with_queue_closed(tmpfs_qdir):
    q = open_q(tmpfs_qdir)
    a, b = q.reader("a"), q.reader("b")
    threads = start_waiters(a, 3) + start_waiters(b, 2)
    q.close()
    join_all(threads)
    assert all(isinstance(t.error, QueueClosed) for t in threads)
    with pytest.raises(QueueClosed):
        a.get(block=False)


def test_close_wakes_waiters_that_have_a_timeout(tmpfs_qdir):
    q = open_q(tmpfs_qdir)
    r = q.reader("a")
    threads = start_waiters(r, 2, timeout=DEADLINE)
    q.close()
    join_all(threads)
    assert all(isinstance(t.error, QueueClosed) for t in threads)


def test_remove_reader_wakes_its_waiters_with_queue_closed(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r, other = q.reader("a"), q.reader("b")
        threads = start_waiters(r, 2)
        q.remove_reader("a")
        join_all(threads)
        assert all(isinstance(t.error, QueueClosed) for t in threads)
        q.put(b"x")
        assert other.get(block=False).data == b"x"


def test_waiting_consumers_are_served_in_fifo_order(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        threads = start_waiters(r, 6)
        ids = q.put_many([b"%d" % k for k in range(6)])
        join_all(threads)
        assert [t.item.id for t in threads] == ids


def test_items_put_one_by_one_go_to_waiters_in_arrival_order(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        threads = start_waiters(r, 4)
        ids = [q.put(b"%d" % k) for k in range(4)]
        join_all(threads)
        assert [t.item.id for t in threads] == ids


def test_a_late_get_does_not_overtake_a_waiting_one(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        (t,) = start_waiters(r, 1)
        q.put(b"first")
        # the item was handed to the waiter before it woke: a non-blocking get finds nothing
        with pytest.raises(Empty):
            r.get(block=False)
        join_all([t])
        assert t.item.data == b"first"


def test_each_item_goes_to_exactly_one_of_many_getters(tmpfs_qdir):
    n_items, n_threads = 3000, 8
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        got: list[list[int]] = [[] for _ in range(n_threads)]
        stop = threading.Event()

        def consume(k: int) -> None:
            while not stop.is_set():
                try:
                    item = r.get(timeout=0.05)
                except Empty:
                    continue
                except QueueClosed:
                    return
                got[k].append(item.id)
                r.commit(item)

        threads = [threading.Thread(target=consume, args=(k,), daemon=True) for k in range(n_threads)]
        for t in threads:
            t.start()
        ids = []
        for k in range(0, n_items, 100):
            ids += q.put_many([b"%d" % j for j in range(k, min(k + 100, n_items))])
        wait_until(lambda: sum(map(len, got)) >= n_items, "all items consumed")
        stop.set()
        join_all(threads)
        delivered = [i for g in got for i in g]
        assert sorted(delivered) == ids  # every id, none twice
        for g in got:  # each consumer sees ids in hand-out (= id) order
            assert g == sorted(g)


# ----------------------------------------------------------------------------- commit / abort


def test_commit_accepts_the_item_or_its_id(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([b"1", b"2"])
        r.commit(r.get(block=False))
        r.commit(r.get(block=False).id)
        assert r.stats().open_reads == 0 and r.stats().committed == 2


@pytest.mark.parametrize("op", ["commit", "abort"])
def test_commit_or_abort_of_an_unknown_id_raises_unknown_read_and_changes_nothing(tmpfs_qdir, op):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        q.put_many([b"1", b"2", b"3"])
        held = r.get(block=False)
        before = state(r)
        for bad in (held.id + 1, 999, 0):  # waiting, never put, never valid
            with pytest.raises(UnknownRead) as info:
                getattr(r, op)(bad)
            assert isinstance(info.value, JournaledError) and isinstance(info.value, KeyError)
        assert state(r) == before
        r.commit(held)
        with pytest.raises(UnknownRead):  # already committed
            getattr(r, op)(held)
        assert [i.data for i in drain(r)] == [b"2", b"3"]


def test_commit_of_an_id_open_on_another_reader_raises_unknown_read(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        a, b = q.reader("a"), q.reader("b")
        q.put(b"x")
        item = a.get(block=False)
        with pytest.raises(UnknownRead):
            b.commit(item)
        assert b.get(block=False).id == item.id
        a.commit(item)


def test_abort_returns_item_to_head_with_error_count_plus_one(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        ids = q.put_many([b"1", b"2", b"3"])
        first = r.get(block=False)
        second = r.get(block=False)
        r.abort(first)
        again = r.get(block=False)
        assert (again.id, again.data, again.error_count) == (ids[0], b"1", 1)
        assert again.add_time == first.add_time
        r.abort(again)
        r.abort(second)
        # most recently aborted first: each abort puts the item back at the very head
        order = drain(r)
        assert [(i.id, i.error_count) for i in order] == [(ids[1], 1), (ids[0], 2), (ids[2], 0)]


def test_commit_after_close_raises_queue_closed(tmpfs_qdir):
    q = open_q(tmpfs_qdir)
    r = q.reader("a")
    q.put(b"x")
    item = r.get(block=False)
    q.close()
    with pytest.raises(QueueClosed):
        r.commit(item)
    with pytest.raises(QueueClosed):
        r.abort(item)


# ----------------------------------------------------------------------------- fan-out and start


def test_fan_out_every_reader_sees_every_item_in_order(tmpfs_qdir):
    with open_q(tmpfs_qdir, journal_size=512) as q:
        readers = [q.reader(n) for n in ("a", "b", "c")]
        ids = q.put_many([b"%03d" % k for k in range(50)])
        ids += [q.put(b"%03d" % k) for k in range(50, 100)]
        got_a = [i.id for i in drain(readers[0])]
        # b commits as it goes, c aborts its first read: neither affects the others
        got_b = []
        for item in drain(readers[1]):
            got_b.append(item.id)
            readers[1].commit(item)
        readers[2].abort(readers[2].get(block=False))
        got_c = [i.id for i in drain(readers[2])]
        assert got_a == got_b == got_c == ids


def test_fan_out_with_tiny_memory_reads_behind_in_order(tmpfs_qdir):
    with open_q(tmpfs_qdir, journal_size=300) as q:
        small = q.reader("small", ReaderConfig(max_memory=1))
        big = q.reader("big")
        ids = q.put_many([os.urandom(20) for _ in range(60)])
        got = drain(small)
        assert [i.id for i in got] == ids
        assert [i.data for i in got] == [i.data for i in drain(big)]


def test_new_reader_starts_at_earliest_by_default(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        ids = q.put_many([b"1", b"2"])
        r = q.reader("a")
        ids += [q.put(b"3")]
        assert [i.id for i in drain(r)] == ids


def test_new_reader_with_start_latest_sees_only_later_items(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        q.put_many([b"1", b"2"])
        r = q.reader("a", ReaderConfig(start="latest"))
        later = q.put(b"3")
        assert [i.id for i in drain(r)] == [later]


def test_new_reader_with_an_item_id_starts_there(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        ids = q.put_many([b"%d" % k for k in range(10)])
        r = q.reader("a", ReaderConfig(start=ids[6]))
        assert [i.id for i in drain(r)] == ids[6:]


def test_start_id_outside_the_journal_is_clamped(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        ids = q.put_many([b"1", b"2"])
        beyond = q.reader("beyond", ReaderConfig(start=10**9))
        before = q.reader("before", ReaderConfig(start=0))
        later = q.put(b"3")
        assert [i.id for i in drain(beyond)] == [later]
        assert [i.id for i in drain(before)] == ids + [later]


def test_start_only_matters_when_the_reader_is_new(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        ids = q.put_many([b"1", b"2"])
        r = q.reader("a")
        with pytest.warns(UserWarning, match=r"reader\.seek"):
            assert q.reader("a", ReaderConfig(start="latest")) is r
        assert [i.id for i in drain(r)] == ids


def test_readers_are_remembered_across_reopen(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        q.reader("b")
        q.reader("a", ReaderConfig(start="latest"))
        assert q.readers() == ["a", "b"]
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == ["a", "b"]
        ids = q.put_many([b"x"])
        assert [i.id for i in drain(q.reader("a"))] == ids


def test_remove_reader_forgets_it_and_its_checkpoint(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        q.reader("a")
        r = q.reader("b")
        q.put(b"x")
        q.remove_reader("b")
        assert q.readers() == ["a"]
        assert not os.path.exists(os.path.join(q.path, f"{q.name}.read.b"))
        with pytest.raises(QueueClosed):
            r.get(block=False)
        with pytest.raises(UnknownReader):
            q.remove_reader("b")
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == ["a"]


def test_a_removed_reader_recreated_starts_afresh(tmpfs_qdir):
    with open_q(tmpfs_qdir) as q:
        r = q.reader("a")
        ids = q.put_many([b"1", b"2"])
        r.commit(r.get(block=False))
        q.remove_reader("a")
        again = q.reader("a")
        assert again is not r
        assert [i.id for i in drain(again)] == ids  # earliest again: its old commits are gone


def test_remove_reader_after_close_raises_queue_closed(tmpfs_qdir):
    q = open_q(tmpfs_qdir)
    q.reader("a")
    q.close()
    with pytest.raises(QueueClosed):
        q.remove_reader("a")
    with open_q(tmpfs_qdir) as q:
        assert q.readers() == ["a"]


def test_a_reader_reading_behind_never_holds_more_than_max_memory(tmpfs_qdir):
    with open_q(tmpfs_qdir, journal_size=2000) as q:
        r = q.reader("a", ReaderConfig(max_memory=100))
        ids = q.put_many([os.urandom(n % 37) for n in range(300)])
        got = []
        while True:
            assert r.stats().bytes_in_memory <= 100
            try:
                item = r.get(block=False)
            except Empty:
                break
            got.append(item.id)
            r.commit(item)
        assert got == ids
