"""Scoped reads: reader.transaction, reader.iter, and libkestrel's wrappers."""

from __future__ import annotations

import gc
import pickle
import time

import pytest

from conftest import Boom
from journaled import (
    Empty,
    Full,
    JournaledQueue,
    QueueConfig,
    ReaderConfig,
    SerializationError,
    UnknownRead,
)
from journaled.wrappers import BlockingQueue, Transaction, TransactionalQueue


def open_reads(reader) -> int:
    return len(reader.core.open)


# ---------------------------------------------------------------- reader.transaction
def test_transaction_commits_on_normal_exit(jq):
    r = jq.reader("r")
    jq.put(b"a")
    with r.transaction(timeout=1.0) as item:
        assert item.data == b"a"
        assert open_reads(r) == 1  # not committed before the block ran
    assert open_reads(r) == 0
    assert r.head == item.id + 1
    with pytest.raises(Empty):
        r.get(block=False)


def test_transaction_aborts_on_exception_and_the_item_returns_to_the_head(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])
    with pytest.raises(Boom):
        with r.transaction() as item:
            assert item.data == b"a"
            raise Boom
    again = r.get(block=False)
    assert (again.data, again.error_count) == (b"a", 1)


def test_transaction_releases_uncounted_on_keyboard_interrupt(jq):
    r = jq.reader("r")
    jq.put(b"a")
    with pytest.raises(KeyboardInterrupt):
        with r.transaction():
            raise KeyboardInterrupt
    again = r.get(block=False)
    assert (again.data, again.error_count) == (b"a", 0)


def test_transaction_raises_empty_on_timeout_and_opens_nothing(jq):
    r = jq.reader("r")
    with pytest.raises(Empty):
        with r.transaction(timeout=0.01):
            pytest.fail("the block must not run")
    with pytest.raises(ValueError):
        r.transaction(timeout=-1)
    assert open_reads(r) == 0


def test_transaction_leaves_alone_an_item_the_block_settled_itself(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])
    with r.transaction() as item:
        r.abort(item)  # the block decided; exit must not commit it behind its back
    assert r.get(block=False).data == b"a"


def test_transaction_survives_reopen_when_the_process_dies_inside_the_block(qdir):
    q = JournaledQueue(qdir, QueueConfig(sync="always"))
    r = q.reader("r")
    q.put(b"a")
    ctx = r.transaction()
    ctx.__enter__()
    q.close()  # "dies" inside the block: the read was never committed
    with JournaledQueue(qdir) as q2:
        assert q2.reader("r").get(block=False).data == b"a"


# ---------------------------------------------------------------- reader.iter
def test_iter_commits_each_item_only_when_the_next_one_is_requested(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b", b"c"])
    seen = []
    for item in r.iter(timeout=0.01):
        # while the body runs, this item is open and nothing after the head is committed
        assert open_reads(r) == 1 and r.head == item.id
        seen.append(item.data)
    assert seen == [b"a", b"b", b"c"]
    assert open_reads(r) == 0
    assert r.head == jq.journal.next_id  # the last one was committed when the loop ended


def test_iter_body_exception_gives_the_item_back_with_an_error_counted(jq):
    r = jq.reader("r")
    _, b_id = jq.put_many([b"a", b"b"])
    with pytest.raises(Boom):
        with r.iter(timeout=0.01) as items:
            for item in items:
                if item.data == b"b":
                    raise Boom
    assert r.head == b_id  # "a" committed (its body finished), "b" not
    again = r.get(block=False)
    assert (again.data, again.error_count) == (b"b", 1)


def test_iter_break_gives_the_item_back_uncounted(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])
    with r.iter(timeout=0.01) as items:
        for item in items:
            break
    again = r.get(block=False)
    assert (again.data, again.error_count) == (b"a", 0)


def test_iter_without_with_gives_the_item_back_when_collected(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])

    def first():
        for item in r.iter(timeout=0.01):
            return item.data
        return None

    assert first() == b"a"
    gc.collect()
    assert open_reads(r) == 0
    assert r.get(block=False).data == b"a"


def test_iter_finalizer_never_deadlocks_when_the_lock_is_held(jq):
    r = jq.reader("r")
    jq.put(b"a")
    it = r.iter(timeout=0.01)
    next(it)
    with r.core.lock:  # a collection can run at any allocation, even under the reader lock
        it.__del__()
    it._current = None
    for _ in range(500):
        if not open_reads(r):
            break
        gc.collect()
        time.sleep(0.01)
    assert r.get(timeout=5).data == b"a"


def test_iter_stops_when_the_queue_closes(qdir):
    q = JournaledQueue(qdir)
    r = q.reader("r")
    q.put_many([b"a", b"b"])
    it = r.iter()
    assert next(it).data == b"a"
    q.close()  # while the body for "a" runs: its commit can no longer happen
    with pytest.raises(StopIteration):
        next(it)
    with JournaledQueue(qdir) as q2:
        r2 = q2.reader("r")
        assert [r2.get(block=False).data for _ in range(2)] == [b"a", b"b"]


def test_iter_blocked_in_get_stops_when_the_queue_closes(qdir):
    import threading

    q = JournaledQueue(qdir)
    r = q.reader("r")
    seen = []
    t = threading.Thread(target=lambda: seen.extend(i.data for i in r.iter()))
    t.start()
    q.put(b"a")
    while r.core.open or not r.core.waiters:
        time.sleep(0.005)  # wait for the loop to block on the next item (bounded by join below)
        if not t.is_alive():
            break
    q.close()
    t.join(30)
    assert not t.is_alive() and seen == [b"a"]


def test_transaction_commit_after_close_raises_but_abort_after_close_is_quiet(qdir):
    from journaled import QueueClosed

    q = JournaledQueue(qdir)
    r = q.reader("r")
    q.put_many([b"a", b"b"])
    with pytest.raises(QueueClosed):
        with r.transaction():
            q.close()
    q = JournaledQueue(qdir)
    r = q.reader("r")
    with pytest.raises(Boom):
        with r.transaction():
            q.close()
            raise Boom  # not masked by a QueueClosed from the abort


# ---------------------------------------------------------------- wrappers
def test_blocking_queue_get_commits_at_once(qdir):
    with JournaledQueue(qdir, QueueConfig(sync="always")) as q:
        bq = q.blocking_queue("r", serializer=pickle)
        assert isinstance(bq, BlockingQueue)
        assert bq.put({"x": 1}) is True
        assert bq.put([2]) is True
        assert bq.size == 2 and len(bq) == 2
        assert bq.get(timeout=1) == {"x": 1}
        assert bq.reader.stats().open_reads == 0
        assert bq.poll() == [2]
        assert bq.poll() is None
        with pytest.raises(Empty):
            bq.get(timeout=0.01)
        bq.sync()
    with JournaledQueue(qdir) as q:
        assert q.blocking_queue("r").poll() is None  # nothing comes back: it was committed


def test_blocking_queue_defaults_to_raw_bytes(jq):
    bq = jq.blocking_queue(jq.reader("r"))
    bq.put(b"raw")
    assert bq.get() == b"raw"
    with pytest.raises(SerializationError):
        bq.put("text")


def test_transactional_queue_commit_and_rollback(jq):
    tq = jq.transactional_queue("r", serializer=pickle)
    assert isinstance(tq, TransactionalQueue)
    tq.put(("a", 1))
    tq.put(("b", 2))
    txn = tq.get(timeout=1)
    assert isinstance(txn, Transaction)
    assert txn.item == ("a", 1) and txn.error_count == 0
    txn.rollback()
    txn = tq.get(timeout=1)
    assert txn.item == ("a", 1) and txn.error_count == 1
    txn.commit()
    with pytest.raises(UnknownRead):
        txn.commit()
    with tq.get() as txn:
        assert txn.item == ("b", 2)
    assert tq.poll() is None
    assert tq.reader.stats().open_reads == 0


def test_transactional_queue_context_rolls_back_on_exception(jq):
    tq = jq.transactional_queue("r")
    tq.put(b"x")
    with pytest.raises(Boom):
        with tq.get() as txn:
            raise Boom
    txn = tq.poll()
    assert txn is not None and (txn.item, txn.error_count) == (b"x", 1)


def test_wrappers_abort_an_undecodable_item_and_raise(jq):
    jq.put(b"\x00 not a pickle")
    tq = jq.transactional_queue("r", serializer=pickle)
    with pytest.raises(SerializationError) as info:
        tq.get(timeout=1)
    assert info.value.item is not None
    assert tq.reader.get(block=False).error_count == 1  # aborted, not lost


def test_wrapper_put_reports_a_full_reader_as_false(qdir):
    with JournaledQueue(qdir) as q:
        q.reader("r", ReaderConfig(max_items=1))
        bq = q.blocking_queue("r")
        assert bq.put(b"1") is True
        assert bq.put(b"2") is False
        assert bq.size == 1
    assert issubclass(Full, Exception)


def test_a_thread_get_interrupted_after_a_hand_off_gives_the_item_back(jq, monkeypatch):
    """KeyboardInterrupt can surface from inside ``Condition.wait``; an item handed to that
    waiter meanwhile must go back to the head (uncounted), not stay stranded on a dead waiter."""
    import threading

    from journaled import reader as reader_mod

    r = jq.reader("r")

    class InterruptedCond:
        def __init__(self, lock):
            self.lock = lock

        def notify(self):
            pass

        def wait(self, timeout=None):
            self.lock.release()
            t = threading.Thread(target=jq.put, args=(b"x",))  # the hand-off happens here
            t.start()
            t.join()
            self.lock.acquire()
            raise KeyboardInterrupt

    class Waiter(reader_mod.ThreadWaiter):
        def __init__(self, lock):
            super().__init__(lock)
            self.cond = InterruptedCond(lock)

    monkeypatch.setattr(reader_mod, "ThreadWaiter", Waiter)
    with pytest.raises(KeyboardInterrupt):
        r.get(timeout=30)
    monkeypatch.undo()
    assert not r.core.waiters and not r.core.open
    again = r.get(block=False)
    assert (again.data, again.error_count) == (b"x", 0)
