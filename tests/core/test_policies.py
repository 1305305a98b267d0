"""Reader policies: max_items/max_size and the full policy, expiry, open-read timeouts, dead
letters, start-from-time — each alone, combined, and through reopen."""

from __future__ import annotations

import datetime as dt
import logging
import queue as stdlib_queue
import threading
import time

import pytest

from conftest import ready_items
from journaled import (
    DeadLetter,
    Empty,
    Full,
    Item,
    JournaledQueue,
    QueueConfig,
    ReaderConfig,
    UnknownRead,
)
from journaled.core import retry
from journaled.core.readercore import ITEM_OVERHEAD
from journaled.disk import fileio
from journaled.log.journal import Journal
from support.clock import FakeClock

FAST = QueueConfig(sync="never")


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock(mono=1000.0)
    monkeypatch.setattr(retry, "CLOCK", c)  # the cores of queues opened from now on run on it
    return c


def drain(reader, commit=True):
    out = []
    for item in ready_items(reader):
        out.append(item.data)
        if commit:
            reader.commit(item)
    return out


# ----------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "kwargs",
    [
        {"max_items": 0},
        {"max_items": 1.5},
        {"max_items": True},
        {"max_size": -1},
        {"max_age": 0},
        {"max_age": float("nan")},
        {"open_read_timeout": -1.0},
        {"max_errors": 0},
        {"expire_to": 42},
        {"dead_letter": "not-callable"},
        {"retry_delay": 0},
        {"retry_delay_max": -1.0},
    ],
)
def test_bad_policy_values_are_rejected_naming_the_field(kwargs):
    with pytest.raises(ValueError) as info:
        ReaderConfig(**kwargs)
    field = next(iter(kwargs))
    assert field in str(info.value)


def test_policy_defaults_are_off():
    cfg = ReaderConfig()
    assert (cfg.max_items, cfg.max_size, cfg.max_age, cfg.open_read_timeout, cfg.max_errors) == (
        None,
        None,
        None,
        None,
        None,
    )
    assert cfg.discard_old_when_full is False
    assert cfg.expire_to is None and cfg.dead_letter is None
    with pytest.raises(AttributeError):
        cfg.max_items = 3  # type: ignore[misc]


# ----------------------------------------------------------------------------- full
def test_put_to_a_full_reader_raises_full_naming_it_and_writes_nothing(qdir):
    with JournaledQueue(qdir, FAST) as q:
        small = q.reader("small", ReaderConfig(max_items=2))
        big = q.reader("big")
        q.put_many([b"a", b"b"])
        before = q.stats()
        with pytest.raises(Full) as info:
            q.put(b"c")
        assert isinstance(info.value, stdlib_queue.Full)
        assert "small" in str(info.value)
        after = q.stats()
        assert after.next_id == before.next_id
        assert after.journal_bytes == before.journal_bytes
        assert drain(big) == [b"a", b"b"]  # no reader saw the refused item
        assert drain(small) == [b"a", b"b"]
        q.put(b"c")  # room again
        assert drain(small) == [b"c"]


def test_put_many_that_would_pass_max_items_is_refused_whole(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=3))
        q.put(b"a")
        with pytest.raises(Full):
            q.put_many([b"b", b"c", b"d"])
        assert drain(r) == [b"a"]


def test_max_size_counts_payload_bytes_of_the_backlog_including_open_reads(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_size=10))
        q.put(b"12345")
        q.put(b"12345")
        item = r.get(block=False)  # an open read still counts
        with pytest.raises(Full):
            q.put(b"x")
        r.commit(item)
        q.put(b"x")
        assert r.stats().backlog_bytes == 6


def test_a_full_reader_is_still_full_after_reopen(qdir):
    cfg = ReaderConfig(max_items=3, max_size=1000)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        q.put_many([b"a", b"b", b"c", b"d"][:3])
        r.commit(r.get(block=False))
        q.put(b"d")
        assert r.stats().full
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        assert r.stats().full
        assert r.stats().backlog_items == 3
        with pytest.raises(Full):
            q.put(b"e")
        assert drain(r) == [b"b", b"c", b"d"]


def test_max_size_after_reopen_never_under_estimates(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=64))
        q.put_many([b"x" * 100] * 20)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=64, max_size=2000))
        st = r.stats()
        assert st.backlog_bytes >= 2000 and not st.backlog_bytes_exact
        with pytest.raises(Full):
            q.put(b"y")
        drain(r)
        st = r.stats()
        assert st.backlog_bytes == 0 and st.backlog_bytes_exact


def test_discard_old_when_full_drops_the_oldest_waiting_items_and_counts_them(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=3, discard_old_when_full=True, max_memory=4))
        other = q.reader("other")
        q.put_many([b"1", b"2", b"3"])
        opened = r.get(block=False)  # b"1": open reads are never discarded
        q.put(b"4")  # drops b"2"
        q.put_many([b"5", b"6"])  # drops b"3", b"4"
        assert r.stats().discarded == 3
        r.commit(opened)
        assert drain(r) == [b"5", b"6"]
        assert len(drain(other)) == 6  # only that reader lost items


def test_discard_survives_reopen_as_committed(qdir):
    cfg = ReaderConfig(max_items=2, discard_old_when_full=True)
    with JournaledQueue(qdir, FAST) as q:
        q.reader("r", cfg)
        q.put_many([b"1", b"2"])
        q.put(b"3")
    with JournaledQueue(qdir, FAST) as q:
        assert drain(q.reader("r", cfg)) == [b"2", b"3"]


def test_discard_cannot_make_room_from_open_reads_so_put_raises_full(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=2, discard_old_when_full=True))
        q.put_many([b"1", b"2"])
        a, b = r.get(block=False), r.get(block=False)
        with pytest.raises(Full):
            q.put(b"3")
        assert r.stats().discarded == 0
        r.commit(a)
        r.commit(b)


def test_a_refusing_reader_stops_a_discarding_one_from_discarding(qdir):
    with JournaledQueue(qdir, FAST) as q:
        d = q.reader("d", ReaderConfig(max_items=1, discard_old_when_full=True))
        q.reader("strict", ReaderConfig(max_items=1))
        q.put(b"1")
        with pytest.raises(Full):
            q.put(b"2")
        assert d.stats().discarded == 0
        assert drain(d) == [b"1"]


def test_discard_reads_old_items_back_from_disk_when_memory_is_empty(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=50, discard_old_when_full=True, max_memory=10))
        q.put_many([b"%03d" % i for i in range(50)])
        q.put_many([b"new%d" % i for i in range(20)])
        got = drain(r)
        assert got == [b"%03d" % i for i in range(20, 50)] + [b"new%d" % i for i in range(20)]
        assert r.stats().discarded == 20


# ----------------------------------------------------------------------------- expiry
def test_expired_items_are_never_delivered(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put(b"ttl", ttl=5)
        q.put(b"at", expire_at=clock.wall + 5)
        q.put(b"keep")
        clock.advance(6)
        assert drain(r) == [b"keep"]
        assert r.stats().expired == 2


def test_expire_at_accepts_a_datetime(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put(b"old", expire_at=dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=5))
        q.put(b"new")
        clock.advance(10)
        assert drain(r) == [b"new"]


def test_max_age_expires_items_added_longer_ago(qdir, clock, monkeypatch):
    monkeypatch.setattr(time, "time_ns", lambda: int(clock.wall * 1e9))  # add times too
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_age=30))
        other = q.reader("other")
        q.put_many([b"a", b"b"])
        clock.advance(31)
        q.put(b"c")
        assert drain(r) == [b"c"]
        assert drain(other) == [b"a", b"b", b"c"]  # max_age is per reader


def test_an_item_expiring_after_the_sweep_does_not_wedge_the_head(qdir, clock):
    """libkestrel's bug: the sweep had passed the head item, it expired before delivery, and
    the reader stalled on it.  Here the check happens at delivery itself."""
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put(b"soon", ttl=1)
        q.put(b"later", ttl=100)
        q.put(b"never")
        q.run_policies()  # the sweep: nothing has expired yet
        assert r.stats().expired == 0
        # no further sweep may help (the background thread's included: it needs the lock held
        # here), so only delivery can
        with r.core.lock:
            clock.advance(2)  # now the head expires, before anyone asked for it
            item = r.core.take()
        assert item is not None
        assert item.data == b"later"
        r.commit(item)
        clock.advance(200)
        assert drain(r) == [b"never"]


def test_a_blocked_getter_is_not_handed_an_item_that_expired(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        out: list[bytes] = []
        t = threading.Thread(target=lambda: out.append(r.get(timeout=30).data))
        t.start()
        deadline = time.monotonic() + 30
        while not r.core.waiters and time.monotonic() < deadline:
            time.sleep(0.001)
        q.put(b"dead", expire_at=clock.wall - 1)
        q.put(b"alive")
        t.join(30)
        assert out == [b"alive"]


def test_expired_items_go_to_expire_to_callable_off_the_lock(qdir, clock):
    seen: list[Item] = []

    def sink(item: Item) -> None:
        q.put(b"from-sink")  # would deadlock if sinks ran under the queue lock
        seen.append(item)

    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(expire_to=sink))
        q.put(b"x", ttl=1)
        clock.advance(2)
        q.run_policies()
        assert [i.data for i in seen] == [b"x"]
        assert drain(r) == [b"from-sink"]
        assert r.stats().expired == 1


def test_expire_to_another_queue_puts_the_payload_there(tmp_path, clock):
    with JournaledQueue(tmp_path / "dlq", FAST) as dlq, JournaledQueue(tmp_path / "q", FAST) as q:
        sink_reader = dlq.reader("r")
        r = q.reader("r", ReaderConfig(expire_to=dlq))
        q.put(b"stale", ttl=1)
        clock.advance(2)
        with pytest.raises(Empty):
            r.get(block=False)
        q.run_policies()
        assert [DeadLetter.decode(d).data for d in drain(sink_reader)] == [b"stale"]


def test_the_background_thread_hands_expired_items_to_the_sink(qdir):
    got = threading.Event()
    with JournaledQueue(qdir, QueueConfig(sync="always")) as q:
        q.reader("r", ReaderConfig(max_age=0.05, expire_to=lambda item: got.set()))
        q.put(b"x")
        assert got.wait(30)


def test_an_expired_item_stays_expired_after_reopen(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        q.reader("r")
        q.put(b"x", ttl=5)
        q.put(b"y")
    clock.advance(6)
    with JournaledQueue(qdir, FAST) as q:
        assert drain(q.reader("r")) == [b"y"]


def test_a_sink_that_raises_is_logged_and_its_item_not_redelivered(qdir, clock, caplog):
    def broken(item: Item) -> None:
        raise RuntimeError("sink down")

    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(expire_to=broken))
        q.put(b"x", ttl=1)
        clock.advance(2)
        with caplog.at_level(logging.ERROR, logger="journaled"):
            q.run_policies()
        assert "sink down" in caplog.text
        assert drain(r) == []
        assert r.stats().backlog_items == 0


def test_items_bound_for_a_sink_reach_it_before_close_commits_them(qdir, clock):
    seen: list[bytes] = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(expire_to=lambda i: seen.append(i.data)))
        q.put(b"x", ttl=1)
        clock.advance(2)
        with pytest.raises(Empty):
            r.get(block=False)  # parks x for the sink
    assert seen == [b"x"]
    with JournaledQueue(qdir, FAST) as q:
        assert q.reader("r").stats().backlog_items == 0


def test_expired_items_make_room_in_a_full_reader(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=2))
        q.put_many([b"a", b"b"], ttl=1)
        with pytest.raises(Full):
            q.put(b"c")
        clock.advance(2)
        q.put(b"c")  # the put sweeps the expired head first
        assert drain(r) == [b"c"]
        assert r.stats().expired == 2


# ----------------------------------------------------------------------------- open reads
def test_a_read_open_longer_than_open_read_timeout_is_aborted(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=10))
        q.put_many([b"a", b"b"])
        a = r.get(block=False)
        clock.advance(5)
        b = r.get(block=False)
        clock.advance(6)  # a: 11 s open, b: 6 s
        q.run_policies()
        st = r.stats()
        assert (st.open_reads, st.timed_out, st.aborted) == (1, 1, 1)
        with pytest.raises(UnknownRead):
            r.commit(a)  # the consumer was presumed dead
        again = r.get(block=False)
        assert (again.id, again.error_count) == (a.id, 1)
        r.commit(b)
        r.commit(again)


def test_the_background_thread_enforces_open_read_timeout(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=0.05))
        q.put(b"a")
        first = r.get(block=False)
        again = r.get(timeout=30)  # returned to the head by the background thread
        assert again.id == first.id and again.error_count == 1


# ----------------------------------------------------------------------------- dead letters
def test_an_item_aborted_max_errors_times_goes_to_dead_letter(qdir):
    dead: list[Item] = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_errors=3, dead_letter=dead.append))
        q.put_many([b"poison", b"fine"])
        for _ in range(3):
            item = r.get(block=False)
            assert item.data == b"poison"
            r.abort(item)
        item = r.get(block=False)
        assert item.data == b"fine"  # the poison item no longer blocks the reader
        r.commit(item)
        q.run_policies()
        assert [(i.data, i.error_count) for i in dead] == [(b"poison", 3)]
        assert r.stats().dead_lettered == 1
        assert r.stats().backlog_items == 0


def test_max_errors_without_dead_letter_drops_the_item(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_errors=1))
        q.put_many([b"poison", b"fine"])
        r.abort(r.get(block=False))
        assert drain(r) == [b"fine"]
        assert r.stats().dead_lettered == 1


def test_error_counts_that_drive_dead_lettering_survive_a_clean_close(qdir):
    dead: list[Item] = []
    cfg = ReaderConfig(max_errors=3, dead_letter=dead.append, max_memory=8)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        q.put_many([b"poison", b"fine"])
        for _ in range(2):
            r.abort(r.get(block=False))
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        item = r.get(block=False)
        assert (item.data, item.error_count) == (b"poison", 2)
        r.abort(item)
        assert drain(r) == [b"fine"]
    assert [(i.data, i.error_count) for i in dead] == [(b"poison", 3)]


def test_lowering_max_errors_dead_letters_on_delivery_after_reopen(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put_many([b"poison", b"fine"])
        for _ in range(3):
            r.abort(r.get(block=False))
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_errors=2))
        assert drain(r) == [b"fine"]
        assert r.stats().dead_lettered == 1


def test_dead_letter_into_another_queue(tmp_path):
    with JournaledQueue(tmp_path / "dlq", FAST) as dlq, JournaledQueue(tmp_path / "q", FAST) as q:
        dr = dlq.reader("ops")
        r = q.reader("r", ReaderConfig(max_errors=1, dead_letter=dlq))
        q.put(b"bad")
        r.abort(r.get(block=False))
        q.run_policies()
        assert [DeadLetter.decode(d).data for d in drain(dr)] == [b"bad"]


def test_timed_out_reads_count_towards_max_errors(qdir, clock):
    dead: list[Item] = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=1, max_errors=2, dead_letter=dead.append))
        q.put(b"hangs-the-consumer")
        for _ in range(2):
            r.get(block=False)
            clock.advance(2)
            q.run_policies()
        assert [i.data for i in dead] == [b"hangs-the-consumer"]
        assert r.stats().timed_out == 2


def test_policies_combined_through_reopen(qdir, clock):
    dead: list[bytes] = []
    expired: list[bytes] = []
    cfg = ReaderConfig(
        max_items=4,
        max_age=60,
        max_errors=2,
        max_memory=16 + 4 * ITEM_OVERHEAD,  # all 4 in memory
        dead_letter=lambda i: dead.append(i.data),
        expire_to=lambda i: expired.append(i.data),
    )
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        q.put(b"poison")
        q.put(b"old", ttl=30)
        q.put_many([b"a", b"b"])
        with pytest.raises(Full):
            q.put(b"c")
        r.abort(r.get(block=False))
    clock.advance(40)  # b"old" has expired
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        q.put(b"c")  # the expired item made room
        r.abort(r.get(block=False))  # second error: dead letter
        assert drain(r) == [b"a", b"b", b"c"]
    assert dead == [b"poison"] and expired == [b"old"]


# ----------------------------------------------------------------------------- start
def test_start_at_a_point_in_time_lands_on_the_first_item_added_at_or_after_it(qdir, monkeypatch):
    import journaled.queue as jq

    fake_ns = [1_700_000_000_000 * 1_000_000]
    monkeypatch.setattr(jq.time, "time_ns", lambda: fake_ns[0])
    with JournaledQueue(qdir, QueueConfig(sync="never", journal_size=300)) as q:
        for i in range(40):
            fake_ns[0] += 1_000_000_000  # one item per second
            q.put(b"item-%02d" % i)
        t10 = 1_700_000_000 + 11  # the add time of item-10
        assert q.reader("f", ReaderConfig(start=float(t10))).get(block=False).data == b"item-10"
        assert q.reader("g", ReaderConfig(start=t10 - 0.5)).get(block=False).data == b"item-10"
        when = dt.datetime.fromtimestamp(t10 + 5, tz=dt.timezone.utc)
        assert q.reader("d", ReaderConfig(start=when)).get(block=False).data == b"item-15"
        late = q.reader("late", ReaderConfig(start=float(t10 + 1000)))
        with pytest.raises(Empty):
            late.get(block=False)
        q.put(b"next")
        assert late.get(block=False).data == b"next"


class CountingOps(fileio.FileOps):
    def __init__(self) -> None:
        self.fds: set[int] = set()
        self.bytes = 0

    def pread(self, fd: int, size: int, offset: int) -> bytes:
        self.fds.add(fd)
        data = super().pread(fd, size, offset)
        self.bytes += len(data)
        return data


def test_locate_time_matches_a_linear_scan_and_reads_few_files(tmp_path, monkeypatch):
    cfg = QueueConfig(sync="never", journal_size=1024)
    j = Journal(str(tmp_path), "q", cfg)
    add_times = []
    ms = 1_000_000
    for i in range(3000):
        ms += (i * 7919) % 3  # steps of 0, 1 or 2 ms: equal add times span records and files
        first, recorded, _ = j.append([b"p%d" % i], ms, 0)
        add_times.append((first, recorded))
    j.write_out()
    assert len(j.files) > 100

    def linear(when: int) -> int:
        return next((i for i, t in add_times if t >= when), j.next_id)

    for when in [
        0,
        add_times[0][1],
        add_times[1500][1],
        add_times[1500][1] + 1,
        ms,
        ms + 1,
        *range(add_times[0][1] - 1, ms + 2, 97),
    ]:
        assert j.locate_time(when) == linear(when), when

    # binary search: a cold search reads the first record of ~log2(files) files plus one file
    for jf in j.files:
        jf.first_add_ms = None
    ops = CountingOps()
    monkeypatch.setattr(fileio, "ops", ops)
    assert j.locate_time(add_times[2222][1]) == linear(add_times[2222][1])
    # one first record per probe, then the chosen file and at most one record of the next
    assert len(ops.fds) <= len(j.files).bit_length() + 3
    j.close()


def test_start_with_an_item_id_is_kept_across_reopen(qdir):
    with JournaledQueue(qdir, FAST) as q:
        q.put_many([b"%d" % i for i in range(10)])
        r = q.reader("r", ReaderConfig(start=5))
        assert r.get(block=False).data == b"4"  # ids start at 1
    with JournaledQueue(qdir, FAST) as q:
        assert drain(q.reader("r"))[0] == b"4"  # the open read came back; start is not re-applied
