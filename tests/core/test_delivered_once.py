"""Every item once per reader, in id order among the due, where not-before parking, read-behind,
live ``max_memory`` changes and retention meet (issue 34, points 2, 4 and 5).  Time is a fake
clock (tests/support/clock.py), never a sleep; retention is run by the test (``q.archive()``).
"""

from __future__ import annotations

import collections
import math

import pytest

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, stats
from journaled.core import retry
from journaled.errors import UnknownRead
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)
PAD = b"." * 500  # 700 bytes charged each: a few fit in max_memory=4096, the rest are read back


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    c.wall = float(math.ceil(c.wall))  # not-before times built from it are whole milliseconds
    monkeypatch.setattr(retry, "CLOCK", c)  # the cores of queues opened from now on run on it
    monkeypatch.setattr(stats, "time", c)
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


def test_a_read_given_back_stays_first_and_an_item_falling_due_goes_in_id_order_behind_it(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"a", not_before=clock.wall + 1)  # 1
        q.put(b"b", not_before=clock.wall + 2)  # 2
        q.put_many([b"c", b"d"])  # 3, 4
        third = r.get(block=False)
        clock.advance(1)
        q.run_policies()  # 1 falls due: waiting are 1, 4
        r.release(third)  # given back: first, as a stack at the head
        clock.advance(1)
        q.run_policies()  # 2 falls due
        assert drain(r) == [3, 1, 2, 4]


@pytest.mark.parametrize("give_back", ["release", "abort"])
def test_a_read_given_back_goes_first_even_before_a_lower_id_that_falls_due(tmp_path, clock, give_back):
    # The returned item is the next one delivered (README: abort puts it back at the head), also
    # when what sits behind it is in id order and an item with a lower id falls due meanwhile.
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"a", not_before=clock.wall + 1)  # 1
        q.put_many([b"b", b"c", b"d"])  # 2, 3, 4
        second = r.get(block=False)
        getattr(r, give_back)(second)  # given back: 2 is next
        clock.advance(1)
        q.run_policies()  # 1 falls due: behind 2, ahead of 3
        assert drain(r) == [2, 1, 3, 4]


def test_an_item_aborted_with_a_delay_comes_back_ahead_of_later_ids(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b", b"c", b"d"])
        first = r.get(block=False)
        r.abort(first, delay=1)
        clock.advance(1)
        q.run_policies()
        assert drain(r) == [1, 2, 3, 4]


# ----------------------------------------------------------------------------- point 4
RETAIN = QueueConfig(sync="never", journal_size=400, checkpoint_interval=3600.0, retention_bytes=800)


def stage(q: JournaledQueue, r, settle) -> dict[int, object]:
    """Put 60 items, open a read of each, let ``settle(held)`` end some of them, then archive
    what is past retention.  The background archiving pass is held back meanwhile, so retention
    meets exactly the stage set."""
    with q._files.lock:
        q.put_many([b"%02d" % i + b"p" * 38 for i in range(60)])
        held = {it.id: it for it in (r.get(block=False) for _ in range(60))}
        assert sorted(held) == list(range(1, 61))
        settle(held)
    q.archive()
    return held


def drain_counts(r) -> list[tuple[int, int]]:
    """Deliver and commit what is deliverable now: (id, error_count) in delivery order."""
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append((item.id, item.error_count))
        r.commit(item)


def test_retention_does_not_deliver_again_what_was_committed_above_the_new_head(tmpfs_qdir):
    with JournaledQueue(tmpfs_qdir, RETAIN, name="q") as q:
        r = q.reader("r", ReaderConfig(start="earliest"))

        def settle(held):
            for i, it in held.items():
                (r.commit if i % 2 == 0 else r.release)(it)  # evens committed out of order

        stage(q, r, settle)
        keep = q.journal.files[0].first_id
        assert 2 < keep < 59
        again = sorted(i for i, _ in drain_counts(r))  # given back in turn: each to the head
        assert again == [i for i in range(keep, 61) if i % 2], f"keep {keep}: delivered {again}"
        st = r.stats()
        assert st.items_lost_to_retention == q.stats().readers[0].items_lost_to_retention
        assert (st.items_lost_to_retention, st.backlog_items) == (keep // 2, 0)


def test_retention_keeps_the_error_counts_above_the_new_head(tmpfs_qdir):
    with JournaledQueue(tmpfs_qdir, RETAIN, name="q") as q:
        r = q.reader("r", ReaderConfig(start="earliest"))

        def settle(held):
            for i, it in held.items():
                if i > 1:  # 1 stays open: the head waits for it until retention archives it
                    (r.abort if i == 59 else r.commit)(it)  # 59 fails once, the rest are done

        stage(q, r, settle)
        assert 2 < q.journal.files[0].first_id < 59
        assert drain_counts(r) == [(59, 1)]
        assert r.stats().items_lost_to_retention == 1


def test_retention_leaves_open_reads_and_parked_items_above_the_new_head_alone(tmpfs_qdir):
    with JournaledQueue(tmpfs_qdir, RETAIN, name="q") as q:
        r = q.reader("r", ReaderConfig(start="earliest"))

        def settle(held):
            for i in range(2, 57, 2):
                r.commit(held[i])  # out of order: the odd ids stay open
            r.abort(held[58], delay=3600)  # error count 1, parked
            r.abort(held[60])  # error count 1, back at the head

        held = stage(q, r, settle)
        keep = q.journal.files[0].first_id
        assert 2 < keep < 57
        st = r.stats()
        lost = [i for i in range(1, keep) if i % 2]  # open when their files went
        got = (st.head, st.open_reads, st.items_delayed, st.items_lost_to_retention)
        assert got == (keep + (keep % 2 == 0), 30 - len(lost), 1, len(lost)), (
            f"keep {keep}: head, open reads, delayed, lost to retention = {got}"
        )
        with pytest.raises(UnknownRead):
            r.commit(held[lost[-1]])  # its file is gone: taken back, as by a seek
        for i in range(keep + (keep % 2 == 0), 60, 2):
            r.commit(held[i])  # reads above the new head stay open
        assert drain_counts(r) == [(60, 1)]
    with JournaledQueue(tmpfs_qdir, RETAIN, name="q") as q:
        r = q.reader("r")
        assert drain_counts(r) == [(58, 1)]  # a delay lives in memory only: due after a reopen
        assert r.stats().backlog_items == 0
