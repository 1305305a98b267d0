"""An item put with a ``not_before`` is never delivered before it, in the reader core, on a fake
clock: it is parked (out of the delivery order, its id uncommitted) until it is due, whichever
way it reached the reader (a put, read-behind, a seek); an item expired by the time it is due is
expired at once; stats count it apart from the items aborted with a delay (issue 25, point 2).
"""

from __future__ import annotations

import math
import time

import pytest

from journaled import Empty, Full, JournaledQueue, QueueConfig, ReaderConfig, stats
from journaled.core import retry
from journaled.format.metadata import Meta
from journaled.item import Item, MetaItem
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)
DEADLINE = 30.0


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    # a whole second: not-before times the tests build from it are whole milliseconds, which the
    # put stores exactly (it rounds a not-before up to the next millisecond, never down)
    c.wall = float(math.ceil(c.wall))
    monkeypatch.setattr(retry, "CLOCK", c)  # the cores of queues opened from now on run on it
    monkeypatch.setattr(stats, "time", c)
    return c


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.002)


def drain(r) -> list[bytes]:
    """Deliver and commit what is deliverable now; the payloads in delivery order."""
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append(item.data)
        r.commit(item)


# ----------------------------------------------------------------------------- the rule
def test_the_due_time_carries_the_wait_left_from_the_wall_clock_to_the_monotonic_one(clock):
    item = MetaItem(1, b"x", clock.wall, None, 0, Meta(not_before_ms=int((clock.wall + 5) * 1000)))
    assert retry.not_due(item, clock.wall, clock.mono) == pytest.approx(clock.mono + 5, abs=0.002)
    assert retry.not_due(item, clock.wall + 5, clock.mono) is None  # due at its time exactly
    assert retry.not_due(Item(2, b"y", clock.wall), clock.wall, clock.mono) is None
    assert retry.not_due(MetaItem(3, b"z", clock.wall, None, 0, Meta(key=b"k")), clock.wall, 0.0) is None


# ----------------------------------------------------------------------------- delivery
def test_an_item_is_not_delivered_before_its_not_before_and_later_items_pass_it(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"early")
        q.put(b"later", not_before=clock.wall + 10)
        q.put_many([b"a", b"b"])
        assert drain(r) == [b"early", b"a", b"b"]
        clock.advance(9.9)
        assert drain(r) == []
        assert r.stats().head == 2  # the head does not pass the waiting item
        clock.advance(0.1)
        item = r.get(block=False)
        assert item.data == b"later" and item.not_before == pytest.approx(clock.wall, abs=0.002)
        r.commit(item)
        assert r.stats().backlog_items == 0 and r.stats().head == 5


def test_a_due_item_goes_out_before_the_items_waiting_behind_it(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"job", not_before=clock.wall + 3)
        q.put_many([b"a", b"b"])
        assert r.get(block=False).data == b"a"  # left open
        clock.advance(3)
        assert r.get(block=False).data == b"job"


def test_a_wall_clock_stepped_back_parks_the_item_again_rather_than_deliver_it_early(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"later", not_before=clock.wall + 10)
        clock.mono += 10  # the monotonic clock moved on, the wall clock did not
        assert drain(r) == []
        assert r.stats().items_not_due == 1
        clock.advance(10)
        assert drain(r) == [b"later"]


def test_read_behind_holds_back_an_item_read_from_disk_until_it_is_due(tmp_path, clock):
    cfg = ReaderConfig(max_memory=4096)  # a few items fit in memory: the rest are read back
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", cfg)
        q.put_many([b"%03d" % i + b"." * 500 for i in range(40)])
        q.put(b"later", not_before=clock.wall + 10)
        q.put_many([b"%03d" % i + b"." * 500 for i in range(40, 80)])
        assert r.stats().items_on_disk > 0
        got = drain(r)
        assert len(got) == 80 and b"later" not in got
        clock.advance(10)
        assert drain(r) == [b"later"]


def test_a_seek_holds_the_item_back_again(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"later", not_before=clock.wall + 10)
        q.put(b"now")
        assert drain(r) == [b"now"]
        r.seek("earliest")
        assert drain(r) == [b"now"]
        clock.advance(10)
        assert drain(r) == [b"later"]


def test_an_aborted_item_is_redelivered_as_any_other_once_it_was_due(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"later", not_before=clock.wall + 1)
        clock.advance(1)
        item = r.get(block=False)
        r.abort(item, delay=5)
        st = r.stats()
        assert (st.items_delayed, st.items_not_due) == (1, 0)
        clock.advance(5)
        back = r.get(block=False)
        assert (back.data, back.error_count, back.not_before) == (b"later", 1, item.not_before)


# ----------------------------------------------------------------------------- expiry
def test_an_item_expiring_by_its_not_before_is_expired_at_once_and_never_delivered(tmp_path, clock):
    got: list[bytes] = []
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(expire_to=lambda item: got.append(item.data)))
        q.put(b"too late", not_before=clock.wall + 10, expire_at=clock.wall + 10)  # at once
        q.put(b"aged out", not_before=clock.wall + 10)
        q.put(b"fine", not_before=clock.wall + 10, expire_at=clock.wall + 20)
        wait_for(lambda: got == [b"too late"], "the expiry sink")
        assert r.stats().expired == 1 and r.stats().items_not_due == 2
        old = q.reader("old", ReaderConfig(start="earliest", max_age=5))
        assert drain(old) == [] and old.stats().expired == 3  # max_age passes before each is due
        clock.advance(10)
        assert drain(r) == [b"aged out", b"fine"]


def test_an_item_whose_ttl_passes_while_it_waits_for_its_not_before_expires(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"x", not_before=clock.wall + 10, expire_at=clock.wall + 15)
        assert drain(r) == []
        clock.advance(16)
        assert drain(r) == [] and r.stats().expired == 1


# ----------------------------------------------------------------------------- limits, stats
def test_stats_count_items_not_yet_due_apart_from_delayed_ones(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b"], not_before=clock.wall + 10)
        q.put(b"c")
        r.abort(r.get(block=False), delay=30)
        st = r.stats()
        assert (st.items_not_due, st.items_delayed, st.items_waiting, st.items_in_memory) == (2, 1, 3, 3)
        assert st.bytes_in_memory == 3
        clock.advance(10)
        assert sorted(drain(r)) == [b"a", b"b"]
        assert r.stats().items_not_due == 0 and r.stats().items_delayed == 1


def test_not_yet_due_items_count_toward_max_items_and_a_full_reader_does_not_drop_them(tmp_path, clock):
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=2, discard_old_when_full=True))
        q.put_many([b"a", b"b"], not_before=clock.wall + 10)
        assert r.stats().backlog_items == 2 and r.stats().full
        with pytest.raises(Full):  # parked like delayed items: never dropped to make room
            q.put(b"c")
        assert r.stats().discarded == 0
        clock.advance(10)
        assert sorted(drain(r)) == [b"a", b"b"]


def test_an_item_read_back_after_a_reopen_is_parked_as_it_arrives_and_never_discarded(tmp_path, clock):
    path = str(tmp_path / "q")
    cfg = ReaderConfig(max_items=3, discard_old_when_full=True)
    with JournaledQueue(path, FAST) as q:
        q.reader("r", cfg)
        q.put(b"a")
        q.put(b"later", not_before=clock.wall + 10)
        q.put(b"b")
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r", cfg)
        first = r.get(block=False)  # reads the rest back too
        assert first.data == b"a" and r.stats().items_not_due == 1
        q.put(b"c")  # full: the oldest waiting item makes room, never the one not yet due
        assert r.stats().discarded == 1
        r.commit(first)
        assert drain(r) == [b"c"]
        clock.advance(10)
        assert drain(r) == [b"later"]
