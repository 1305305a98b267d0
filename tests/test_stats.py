"""reader.stats() and q.stats(): frozen snapshots, exact where documented, no I/O."""

from __future__ import annotations

import os
import time

import attrs
import pytest

from journaled import Empty, JournaledQueue, QueueConfig, QueueStats, ReaderConfig, ReaderStats
from journaled.core.readercore import ITEM_OVERHEAD
from journaled.disk import fileio

FAST = QueueConfig(sync="never", journal_size=2048)


def test_reader_stats_count_items_and_bytes_in_memory_and_on_disk(qdir):
    with JournaledQueue(qdir, FAST) as q:
        # room for ten 10-byte items, each also charged ITEM_OVERHEAD
        r = q.reader("r", ReaderConfig(max_memory=10 * (10 + ITEM_OVERHEAD)))
        with pytest.raises(Empty):
            r.get(block=False)  # a new reader has looked at the (empty) journal: caught up
        q.put_many([b"x" * 10] * 30)
        st = r.stats()
        assert isinstance(st, ReaderStats)
        assert st.items_waiting == 30 and st.backlog_items == 30
        assert st.items_in_memory == 10 and st.bytes_in_memory == 100
        assert st.items_on_disk == 20 and st.bytes_on_disk == 200
        assert st.bytes_waiting == 300 and st.backlog_bytes == 300 and st.backlog_bytes_exact
        assert st.put == 30
        a = r.get(block=False)
        b = r.get(block=False)
        r.commit(a)
        r.abort(b)
        st = r.stats()
        assert (st.delivered, st.committed, st.aborted) == (2, 1, 1)
        assert st.open_reads == 0 and st.items_waiting == 29 and st.backlog_bytes == 290
        c = r.get(block=False)
        st = r.stats()
        assert st.open_reads == 1 and st.bytes_open == 10 and st.backlog_items == 29
        assert st.items_waiting == 28 and st.bytes_waiting == 280
        r.commit(c)


def test_stats_are_frozen(qdir):
    with JournaledQueue(qdir, FAST) as q:
        st = q.reader("r").stats()
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            st.head = 5  # type: ignore[misc]
        with pytest.raises(attrs.exceptions.FrozenInstanceError):
            q.stats().put = 1  # type: ignore[misc]


def test_oldest_age_is_the_age_of_the_oldest_waiting_item(qdir, monkeypatch):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=8))
        assert r.stats().oldest_age is None
        q.put(b"a" * 8)
        q.put(b"b" * 8)
        real = time.time
        monkeypatch.setattr(time, "time", lambda: real() + 100)
        age = r.stats().oldest_age
        assert age is not None and 99 < age < 200
        r.commit(r.get(block=False))  # b was on disk only; now read back into memory
        age = r.stats().oldest_age
        assert age is not None and 99 < age < 200
        r.commit(r.get(block=False))
        assert r.stats().oldest_age is None


def test_oldest_age_on_disk_after_reopen_is_an_upper_bound(qdir):
    with JournaledQueue(qdir, FAST) as q:
        q.reader("r")
        q.put(b"a")
    before = time.time()  # the item was put before this instant
    time.sleep(0.05)
    with JournaledQueue(qdir, FAST) as q:
        reader = q.reader("r")
        after = time.time()
        st = reader.stats()
        assert st.items_on_disk == 1 and st.items_in_memory == 0
        # the true age at stats() time is at least after - before; an upper bound is >= it
        assert st.oldest_age is not None and st.oldest_age >= (after - before) - 0.002


def test_queue_stats_report_journal_files_and_bytes_on_disk(qdir):
    with JournaledQueue(qdir, FAST) as q:
        q.reader("b")
        q.reader("a")
        q.put_many([b"y" * 100] * 60)  # several 2 KiB files
        q.sync()
        st = q.stats()
        assert isinstance(st, QueueStats)
        names = [
            n
            for n in os.listdir(qdir)
            if n.startswith(q.name + ".") and n.split(".")[-1].isdigit() and ".read." not in n
        ]
        assert st.journal_files == len(names) > 1
        assert st.journal_bytes == sum(os.path.getsize(os.path.join(qdir, n)) for n in names)
        assert (st.put, st.bytes_put, st.next_id) == (60, 6000, 61)
        assert [r.name for r in st.readers] == ["a", "b"]


def test_policy_counters_appear_in_stats(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=2, discard_old_when_full=True, max_errors=1))
        q.put(b"gone", expire_at=time.time() - 1)
        q.put_many([b"1", b"2"])  # full: discards the expired one? no: expiry sweeps it first
        q.put(b"3")  # discards b"1"
        r.abort(r.get(block=False))  # b"2": dead-lettered (dropped) at once
        st = r.stats()
        assert (st.expired, st.discarded, st.dead_lettered) == (1, 1, 1)
        assert st.items_waiting == 1 and not st.full


class NoIO(fileio.FileOps):
    def pread(self, fd, size, offset):  # noqa: ANN001
        raise AssertionError("stats() must not read the journal")

    def open(self, path, flags, mode=0o600):  # noqa: ANN001
        raise AssertionError("stats() must not open files")


def test_stats_do_no_io_even_with_a_backlog_on_disk(qdir, monkeypatch):
    with JournaledQueue(qdir, FAST) as q:
        q.reader("r", ReaderConfig(max_memory=10))
        q.put_many([b"z" * 10] * 200)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=10, max_size=10**6))
        monkeypatch.setattr(fileio, "ops", NoIO())
        st = r.stats()
        qs = q.stats()
        monkeypatch.undo()
        assert st.items_on_disk == 200 and qs.readers[0].backlog_items == 200
        assert st.backlog_bytes >= 2000  # an estimate from file sizes after reopen


def test_stats_are_cheap_enough_to_poll(qdir):
    with JournaledQueue(qdir, FAST) as q:
        for n in range(5):
            q.reader(f"r{n}", ReaderConfig(max_memory=1000))
        q.put_many([b"w" * 50] * 500)
        calls = 0
        while calls < 200:
            q.stats()
            calls += 1
        assert calls == 200  # no timing assertion; see scripts/bench_backlog.py for figures
