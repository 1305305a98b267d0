"""Every item once per reader, in id order among the due, where not-before parking, read-behind
and live ``max_memory`` changes meet (issue 34, points 2 and 5).  Time is a fake clock
(tests/support/clock.py), never a sleep.
"""

from __future__ import annotations

import collections
import math

import pytest

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, stats
from journaled.core import policies, readercore, retry
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)
PAD = b"." * 500  # 700 bytes charged each: a few fit in max_memory=4096, the rest are read back


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    c.wall = float(math.ceil(c.wall))  # not-before times built from it are whole milliseconds
    for module in (readercore, retry, policies, stats):
        monkeypatch.setattr(module, "time", c)
    return c


def drain(r) -> list[int]:
    """Deliver and commit what is deliverable now; the ids in delivery order."""
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append(item.id)
        r.commit(item)


def twice(ids: list[int]) -> list[int]:
    return sorted(i for i, n in collections.Counter(ids).items() if n > 1)


# ----------------------------------------------------------------------------- point 2
@pytest.mark.parametrize("taken_first", range(6))
@pytest.mark.parametrize("raise_memory", [False, True])
def test_an_item_due_while_its_reader_reads_behind_is_delivered_once(
    tmp_path, clock, taken_first, raise_memory
):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=4096))
        q.put_many([b"%03d" % i + PAD for i in range(40)])
        later = q.put(b"later", not_before=clock.wall + 1)
        q.put_many([b"%03d" % i + PAD for i in range(40, 80)])
        assert r.stats().items_on_disk > 0
        got = []
        for _ in range(taken_first):
            item = r.get(block=False)
            got.append(item.id)
            r.commit(item)
        clock.advance(1)
        if raise_memory:  # the next read-behind window reaches the due item's record
            q.reader("r", ReaderConfig(max_memory=1 << 20))
        got += drain(r)
        assert twice(got) == [], f"delivered twice: {twice(got)} (order {got[:8]}...)"
        assert sorted(got) == list(range(1, 82)) and later == 41
        st = r.stats()
        assert (st.committed, st.backlog_items, st.head) == (81, 0, 82)


def test_an_item_put_not_yet_due_to_a_reader_behind_waits_on_disk_in_its_place(tmp_path, clock):
    """Behind, a not-yet-due item is met where read-behind meets its record, in id order."""
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=4096))
        q.put_many([b"%03d" % i + PAD for i in range(10)])
        q.put(b"later", not_before=clock.wall + 1)  # id 11
        q.put_many([b"%03d" % i + PAD for i in range(10, 20)])
        clock.advance(1)
        assert drain(r) == list(range(1, 22))


# ----------------------------------------------------------------------------- point 5
def test_due_items_go_out_in_id_order_whenever_each_fell_due(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"a")  # 1
        q.put(b"b", not_before=clock.wall + 3)  # 2
        q.put(b"c", not_before=clock.wall + 2)  # 3
        q.put(b"d", not_before=clock.wall + 1)  # 4
        q.put_many([b"e", b"f"])  # 5, 6
        q.put(b"g", not_before=clock.wall + 1)  # 7
        q.put(b"h")  # 8
        for _ in range(3):  # each falls due on its own tick, nothing taken meanwhile
            clock.advance(1)
            q.run_policies()
        assert drain(r) == [1, 2, 3, 4, 5, 6, 7, 8]


def test_a_due_item_does_not_pass_earlier_items_still_on_disk(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=4096))
        q.put(b"soon", not_before=clock.wall + 1)  # 1: parked at its put
        q.put_many([b"%03d" % i + PAD for i in range(30)])  # 2..31, most of them on disk
        q.put(b"later", not_before=clock.wall + 1)  # 32: on disk
        q.put_many([b"%03d" % i + PAD for i in range(30, 40)])  # 33..42
        clock.advance(1)
        assert drain(r) == list(range(1, 43))


def test_an_item_aborted_with_a_delay_comes_back_ahead_of_later_ids(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b", b"c", b"d"])
        first = r.get(block=False)
        r.abort(first, delay=1)
        clock.advance(1)
        q.run_policies()
        assert drain(r) == [1, 2, 3, 4]
