"""A reader's compiled ``get``/``commit`` (journaled.reader.CompiledReader) against ``Reader``'s own.

The same calls on two queues, one whose readers are the compiled class and one whose readers are
the reference (the same core built either way), must give the same items, the same errors and
the same state; argument checking is the reference's, whatever the arguments.
"""

from __future__ import annotations

import math
import threading
import time

import pytest

from journaled import Empty, JournaledQueue, QueueClosed, UnknownRead
from journaled.reader import CompiledReader, Reader

pytestmark = pytest.mark.skipif(CompiledReader is None, reason="the compiled reader is not built here")


def _pair(tmp_path):
    fast = JournaledQueue(str(tmp_path / "fast"))
    slow = JournaledQueue(str(tmp_path / "slow"))
    rf = fast.reader("r")
    core = slow.reader("r").core
    rs = Reader(core, None)  # the reference class over the same kind of core
    return fast, slow, rf, rs


def test_the_queue_builds_the_compiled_reader():
    import tempfile

    with tempfile.TemporaryDirectory() as d, JournaledQueue(d + "/q") as q:
        assert type(q.reader("r")) is CompiledReader


def test_get_and_commit_give_what_the_reference_gives(tmp_path):
    fast, slow, rf, rs = _pair(tmp_path)
    for q in (fast, slow):
        q.put_many([b"a", b"b", b"c", b"d"])
    a_f, a_s = rf.get(), rs.get()
    b_f, b_s = rf.get(False), rs.get(False)
    c_f, c_s = rf.get(block=False, timeout=None), rs.get(block=False, timeout=None)
    d_f, d_s = rf.get(timeout=5), rs.get(timeout=5)
    assert [(i.id, i.data) for i in (a_f, b_f, c_f, d_f)] == [(i.id, i.data) for i in (a_s, b_s, c_s, d_s)]
    for f, s in ((c_f, c_s), (a_f, a_s), (d_f, d_s)):  # out of order: done set, then the head moves
        rf.commit(f)
        rs.commit(s)
        assert (rf.core.head, rf.core.done) == (rs.core.head, rs.core.done)
    assert rf.core.committed == rs.core.committed == 3
    rf.commit(b_f.id)  # a bare id
    rs.commit(b_s.id)
    assert rf.core.head == rs.core.head == 5
    fast.close()
    slow.close()


@pytest.mark.parametrize(
    "call, error",
    [
        (lambda r: r.get(block=False), Empty),
        (lambda r: r.get(False, 0), Empty),
        (lambda r: r.get(timeout=0), Empty),
        (lambda r: r.get(timeout=-1), ValueError),
        (lambda r: r.get(timeout=math.nan), ValueError),
        (lambda r: r.get(timeout="1"), TypeError),
        (lambda r: r.get(True, 1, 2), TypeError),
        (lambda r: r.get(wait=1), TypeError),
        (lambda r: r.commit(12345), UnknownRead),
        (lambda r: r.commit(1.5), TypeError),
    ],
)
def test_refusals_are_the_references(tmp_path, call, error):
    fast, slow, rf, rs = _pair(tmp_path)
    with pytest.raises(error) as got_fast:
        call(rf)
    with pytest.raises(error) as got_slow:
        call(rs)
    assert type(got_fast.value) is type(got_slow.value)
    fast.close()
    slow.close()


def test_a_committed_handle_cannot_be_committed_twice(tmp_path):
    fast, slow, rf, _rs = _pair(tmp_path)
    fast.put(b"x")
    item = rf.get()
    rf.commit(item)
    with pytest.raises(UnknownRead):
        rf.commit(item)
    assert rf.core.committed == 1
    fast.close()
    slow.close()


def test_a_blocked_get_is_served_by_a_put_from_another_thread(tmp_path):
    fast, slow, rf, _rs = _pair(tmp_path)
    got = []
    t = threading.Thread(target=lambda: got.append(rf.get(timeout=30)))
    t.start()
    deadline = time.monotonic() + 10
    while rf.waiter_count == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    fast.put(b"late")
    t.join(30)
    assert [i.data for i in got] == [b"late"]
    rf.commit(got[0])
    fast.close()
    slow.close()


def test_a_closed_reader_refuses_as_the_reference_does(tmp_path):
    fast, slow, rf, rs = _pair(tmp_path)
    fast.put(b"x")
    slow.put(b"x")
    item = rf.get()
    fast.close()
    slow.close()
    for r in (rf, rs):
        with pytest.raises(QueueClosed):
            r.get(block=False)
    with pytest.raises(QueueClosed):
        rf.commit(item)
    assert not rf.core.lock.locked()


def test_an_error_inside_take_leaves_the_lock_free(tmp_path):
    fast, slow, rf, _rs = _pair(tmp_path)
    fast.put(b"x")

    class Boom(Exception):
        pass

    def take():
        raise Boom

    rf.core.take = take  # an instance attribute shadows the method, as for any object
    with pytest.raises(Boom):
        rf.get(block=False)
    assert not rf.core.lock.locked()
    del rf.core.take
    assert rf.get(block=False).data == b"x"
    fast.close()
    slow.close()
