"""The job-queue shape: retries with a delay and backoff, rejects, dead letters that say why,
batches, seeking, a worker loop that keeps going, journaled.Queue's nack, and the names users
reach for (docs/design.md, "Job queues")."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import os
import subprocess
import sys
import threading
import time
import warnings

import pytest

import journaled
from journaled import (
    BlockingQueue,
    DeadLetter,
    Empty,
    Item,
    JournaledQueue,
    Queue,
    QueueConfig,
    ReaderConfig,
    UnknownRead,
)
from journaled.core import retry
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    monkeypatch.setattr(retry, "CLOCK", c)  # the cores of queues opened from now on run on it
    return c


def ready(reader) -> list[bytes]:
    """Payloads of every item ready now, each committed."""
    out = []
    while True:
        try:
            item = reader.get(block=False)
        except Empty:
            return out
        out.append(item.data)
        reader.commit(item)


# ----------------------------------------------------------------------------- abort with a delay
def test_aborted_item_with_delay_is_not_delivered_before_its_time_and_does_not_hold_back_the_rest(
    qdir, clock
):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put_many([b"job", b"next", b"last"])
        job = r.get(block=False)
        r.abort(job, delay=30)
        assert ready(r) == [b"next", b"last"]  # the head is not held back
        clock.advance(29)
        assert ready(r) == []
        assert r.stats().items_delayed == 1 and r.stats().items_waiting == 1
        clock.advance(1)
        again = r.get(block=False)
        assert (again.data, again.error_count) == (b"job", 1)


def test_a_blocked_get_wakes_when_a_delayed_item_becomes_due(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put(b"job")
        r.abort(r.get(block=False), delay=0.3)
        start = time.monotonic()
        item = r.get(timeout=10)
        waited = time.monotonic() - start
        assert item.data == b"job" and item.error_count == 1
        assert 0.25 <= waited < 5  # woken at its time by the background, not at the timeout


def test_abort_delay_must_be_a_finite_non_negative_number_and_nothing_changes(jq):
    r = jq.reader("r")
    jq.put(b"x")
    item = r.get(block=False)
    for bad in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="delay"):
            r.abort(item, delay=bad)
    with pytest.raises(TypeError):
        r.abort(item, delay="1")  # type: ignore[arg-type]
    r.commit(item)  # still this very open read


def test_retry_delay_backs_off_exponentially_up_to_retry_delay_max(qdir, clock):
    cfg = ReaderConfig(retry_delay=1.0, retry_delay_max=3.0)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", cfg)
        q.put(b"flaky")
        for expected_delay in (1.0, 2.0, 3.0, 3.0):
            r.abort(r.get(block=False))
            clock.advance(expected_delay - 0.01)
            with pytest.raises(Empty):
                r.get(block=False)
            clock.advance(0.01)
        assert r.get(block=False).error_count == 4


def test_max_errors_with_retry_delay_does_not_burn_its_retries_at_once(qdir, clock):
    dead: list[Item] = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_errors=3, retry_delay=10.0, dead_letter=dead.append))
        q.put(b"poison")
        r.abort(r.get(block=False))
        with pytest.raises(Empty):
            r.get(block=False)  # a tight retry loop gets nothing for 10 s
        clock.advance(10)
        r.abort(r.get(block=False))
        clock.advance(20)
        r.abort(r.get(block=False))
        q.run_policies()
        assert [(d.data, d.error_count) for d in dead] == [(b"poison", 3)]


def test_a_delay_does_not_survive_a_crash_the_item_comes_back_at_once_with_its_error_count(qdir):
    here = os.path.dirname(os.path.dirname(os.path.abspath(journaled.__file__)))
    script = f"""
import os, sys
sys.path.insert(0, {here!r})
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue({qdir!r}, QueueConfig(sync="always"))
r = q.reader("r")
q.put_many([b"job", b"other"])
r.abort(r.get(block=False), delay=3600)
q.checkpoint()
os._exit(0)  # a crash: no close
"""
    subprocess.run([sys.executable, "-c", script], check=True, timeout=60)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        item = r.get(block=False)
        assert (item.data, item.error_count) == (b"job", 1)


def test_delayed_items_are_still_uncommitted_in_the_checkpoint(qdir):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b"])
        a = r.get(block=False)
        r.abort(a, delay=3600)
        r.commit(r.get(block=False))
        assert r.head == a.id  # the head does not pass a delayed id
    with JournaledQueue(qdir, FAST) as q:
        assert ready(q.reader("r")) == [b"a"]


def test_a_delayed_item_is_never_discarded_to_make_room(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=2, discard_old_when_full=True))
        q.put(b"delayed")
        r.abort(r.get(block=False), delay=60)
        q.put_many([b"old"])
        q.put_many([b"new"])  # makes room by dropping "old", not the delayed item
        assert r.stats().discarded == 1
        clock.advance(60)
        assert ready(r) == [b"delayed", b"new"]


# ----------------------------------------------------------------------------- reject
def test_reject_sends_the_item_to_dead_letter_with_its_reason_without_using_retries(qdir):
    dead: list[DeadLetter] = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_errors=5, dead_letter=dead.append))
        q.put_many([b"malformed", b"fine"])
        item = r.get(block=False)
        r.abort(item)
        r.reject(r.get(block=False), reason="schema v0 is not supported")
        assert ready(r) == [b"fine"]
        q.run_policies()
        assert len(dead) == 1
        d = dead[0]
        assert (d.data, d.kind, d.reason, d.error_count, d.id, d.reader) == (
            b"malformed",
            "rejected",
            "schema v0 is not supported",
            1,
            item.id,
            "r",
        )
        st = r.stats()
        assert (st.rejected, st.dead_lettered, st.backlog_items) == (1, 0, 0)


def test_reject_without_dead_letter_drops_the_item_and_counts_it(jq):
    r = jq.reader("r")
    jq.put_many([b"bad", b"good"])
    r.reject(r.get(block=False), reason="nope")
    assert ready(r) == [b"good"]
    assert r.stats().rejected == 1
    with pytest.raises(UnknownRead):
        r.reject(1)


def test_dead_letter_alone_receives_rejects(jq):
    dead: list[DeadLetter] = []
    r = jq.reader("r", ReaderConfig(dead_letter=dead.append))  # no max_errors: only rejects
    jq.put(b"x")
    r.reject(r.get(block=False), "why")
    jq.run_policies()
    assert [(d.data, d.reason) for d in dead] == [(b"x", "why")]


# ----------------------------------------------------------------------------- the envelope
def test_a_queue_dead_letter_destination_gets_an_envelope_with_reason_count_id_and_add_time(tmp_path):
    with JournaledQueue(tmp_path / "dlq", FAST) as dlq, JournaledQueue(tmp_path / "q", FAST) as q:
        ops = dlq.reader("ops")
        r = q.reader("r", ReaderConfig(max_errors=2, dead_letter=dlq))
        q.put(b"\x00payload\xff")
        first = r.get(block=False)
        r.abort(first)
        r.abort(r.get(block=False))
        q.run_policies()
        d = DeadLetter.decode(ops.get(block=False).data)
        assert d.data == b"\x00payload\xff"
        assert (d.kind, d.error_count, d.id, d.add_time, d.reader) == (
            "max_errors",
            2,
            first.id,
            first.add_time,
            "r",
        )
        assert "max_errors=2" in d.reason


def test_the_expiry_destination_gets_kind_expired_and_the_original_times(tmp_path, clock):
    got: list[DeadLetter] = []
    with JournaledQueue(tmp_path / "q", FAST) as q:
        r = q.reader("r", ReaderConfig(expire_to=got.append))
        item_id = q.put(b"stale", ttl=1)
        clock.advance(2)
        q.run_policies()
        assert r.stats().expired == 1
    assert len(got) == 1 and isinstance(got[0], Item)  # callables typed for Item keep working
    assert (got[0].kind, got[0].id, got[0].data, got[0].reason) == ("expired", item_id, b"stale", "expired")
    assert got[0].expire_at is not None


def test_decoding_something_that_is_not_an_envelope_raises_value_error():
    good = DeadLetter(7, b"p", 1.5, None, 2, "rejected", "r", "reader").encode()
    assert DeadLetter.decode(good) == DeadLetter(7, b"p", 1.5, None, 2, "rejected", "r", "reader")
    for bad in (b"", b"plain payload", good[:10], b"JQDL\x02" + good[5:], good[:9] + b"{]" + good[11:]):
        with pytest.raises(ValueError):
            DeadLetter.decode(bad)


# ----------------------------------------------------------------------------- get_many
def test_get_many_opens_up_to_max_items_reads_at_once(jq):
    r = jq.reader("r")
    jq.put_many([b"%d" % i for i in range(5)])
    batch = r.get_many(3)
    assert [i.data for i in batch] == [b"0", b"1", b"2"]
    assert r.stats().open_reads == 3
    r.abort(batch[1])
    r.commit(batch[0])
    r.commit(batch[2])
    assert [i.data for i in r.get_many(10)] == [b"1", b"3", b"4"]


def test_get_many_waits_for_at_least_one_or_raises_empty(jq):
    r = jq.reader("r")
    with pytest.raises(Empty):
        r.get_many(4, timeout=0.01)
    threading.Timer(0.05, lambda: jq.put(b"late")).start()
    assert [i.data for i in r.get_many(4, timeout=10)] == [b"late"]
    with pytest.raises(ValueError):
        r.get_many(0)


# ----------------------------------------------------------------------------- seek
def test_seek_moves_an_existing_reader_to_earliest_latest_an_id_or_a_time(jq, monkeypatch):
    r = jq.reader("r")
    ids = jq.put_many([b"a", b"b", b"c"])
    assert ready(r) == [b"a", b"b", b"c"]
    assert r.seek("earliest") == ids[0]
    assert ready(r) == [b"a", b"b", b"c"]
    assert r.seek(ids[1]) == ids[1]
    assert ready(r) == [b"b", b"c"]
    r.seek("earliest")
    assert r.seek("latest") == ids[2] + 1
    assert ready(r) == []
    later = time.time() + 5
    r.seek("earliest")
    assert r.seek(dt.datetime.fromtimestamp(later)) == ids[2] + 1
    with pytest.raises(ValueError):
        r.seek("newest")  # type: ignore[arg-type]


def test_seek_takes_back_open_reads_first(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])
    open_read = r.get(block=False)
    r.seek("earliest")
    with pytest.raises(UnknownRead):
        r.commit(open_read)
    assert ready(r) == [b"a", b"b"]


def test_a_seek_back_is_kept_by_the_checkpoint_and_its_files_are_not_archived(qdir):
    cfg = QueueConfig(sync="never", checkpoint_interval=3600.0, journal_size=64)
    with JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        # "pin" holds every file until r has moved back: otherwise the background thread may
        # archive them as soon as the first checkpoint moves r's head, before the seek
        q.reader("pin")
        ids = q.put_many([b"%d" % i for i in range(20)])
        ready(r)
        q.checkpoint()
        r.seek(ids[5])
        q.remove_reader("pin")
        q.archive()
        q.checkpoint()
    with JournaledQueue(qdir, cfg) as q:
        assert ready(q.reader("r")) == [b"%d" % i for i in range(5, 20)]


def test_start_for_an_existing_reader_warns_instead_of_being_ignored_silently(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b"])
    with pytest.warns(UserWarning, match="seek"):
        jq.reader("r", ReaderConfig(start="latest"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jq.reader("r", ReaderConfig(start=0))  # where it is already: nothing to say
    assert ready(r) == [b"a", b"b"]


# ----------------------------------------------------------------------------- worker loop
def test_process_keeps_going_after_an_exception_aborting_only_that_item(jq, caplog):
    r = jq.reader("r")
    jq.put_many([b"ok1", b"boom", b"ok2"])
    seen: list[tuple[bytes, int]] = []

    def work(item: Item) -> None:
        seen.append((item.data, item.error_count))
        if item.data == b"boom" and item.error_count == 0:
            raise RuntimeError("transient")

    with caplog.at_level(logging.ERROR, logger="journaled"):
        assert r.process(work, timeout=0.05) == 3
    assert seen == [(b"ok1", 0), (b"boom", 0), (b"boom", 1), (b"ok2", 0)]
    assert "transient" in caplog.text
    assert r.stats().backlog_items == 0


def test_process_hands_errors_to_on_error_and_a_base_exception_ends_it_releasing_the_item(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"stop"])
    errors: list[tuple[int, str]] = []

    def work(item: Item) -> None:
        if item.data == b"stop":
            raise KeyboardInterrupt
        if item.error_count == 0:
            raise ValueError("bad")

    with pytest.raises(KeyboardInterrupt):
        r.process(work, timeout=0.05, on_error=lambda item, exc: errors.append((item.id, str(exc))))
    assert errors == [(1, "bad")]
    st = r.stats()
    assert (st.open_reads, st.aborted, st.committed, st.backlog_items) == (0, 1, 1, 1)


def test_aprocess_keeps_going_after_an_exception(jq):
    r = jq.reader("r")
    jq.put_many([b"1", b"x", b"2"])
    out: list[bytes] = []

    async def work(item: Item) -> None:
        await asyncio.sleep(0)
        if item.data == b"x":
            r.reject(item, "not a number")
            return
        if item.error_count == 0 and item.data == b"2":
            raise RuntimeError("once")
        out.append(item.data)

    assert asyncio.run(r.aprocess(work, timeout=0.05)) == 2
    assert out == [b"1", b"2"] and r.stats().rejected == 1


# ----------------------------------------------------------------------------- journaled.Queue
def test_queue_nack_gives_the_calling_threads_item_back_after_a_delay(qdir, clock):
    q: Queue[str] = Queue(qdir, config=FAST)
    try:
        q.put("job")
        q.put("next")
        assert q.get(block=False) == "job"
        q.nack(delay=5)
        assert q.unfinished_tasks == 2 and q.qsize() == 2
        assert q.get(block=False) == "next"
        q.task_done()
        with pytest.raises(Empty):
            q.get(block=False)
        clock.advance(5)
        assert q.get(block=False) == "job"
        q.task_done()
        q.join()
        with pytest.raises(ValueError):
            q.nack()
    finally:
        q.close()


def test_queue_nack_without_delay_puts_it_back_at_once(qdir):
    with Queue(qdir, config=FAST) as q:
        q.put(1)
        assert q.get() == 1
        q.nack()
        assert q.get(block=False) == 1
        assert q.reader.stats().aborted == 1


def test_queue_get_many_fetches_a_batch(qdir):
    with Queue(qdir, config=FAST) as q:
        for i in range(4):
            q.put(i)
        assert q.get_many(3) == [0, 1, 2]
        assert q.qsize() == 1 and q.unfinished_tasks == 4
        for _ in range(3):
            q.task_done()
        assert q.get_many(3, timeout=0.01) == [3]
        q.task_done()
        q.join()


# ----------------------------------------------------------------------------- names
def test_blocking_queue_flush_empties_the_queue_and_sync_makes_it_durable(qdir):
    with JournaledQueue(qdir, FAST) as q:
        bq = q.blocking_queue("r")
        assert isinstance(bq, BlockingQueue)
        for i in range(5):
            bq.put(b"%d" % i)
        tq = q.transactional_queue("t")
        txn = tq.get(timeout=1)
        assert bq.flush() == 5
        assert len(bq) == 0 and bq.poll() is None
        bq.sync()
        assert len(tq) == 4 and txn.item == b"0"  # another reader is not touched
        txn.commit()
    with JournaledQueue(qdir, FAST) as q:
        assert q.blocking_queue("r").poll() is None


def test_the_library_logger_has_a_null_handler():
    handlers = logging.getLogger("journaled").handlers
    assert any(isinstance(h, logging.NullHandler) for h in handlers)


def test_commit_many_commits_every_open_read_and_names_the_ones_that_were_not(jq):
    r = jq.reader("r")
    jq.put_many([b"a", b"b", b"c", b"d"])
    batch = r.get_many(3)
    r.commit(batch[1])  # settled already: commit_many must still commit the others
    with pytest.raises(UnknownRead, match=r"\[2\]"):
        r.commit_many(batch)
    st = r.stats()
    assert (st.committed, st.open_reads, r.head) == (3, 0, 4)
    with pytest.raises(TypeError):
        r.commit_many([r.get(block=False), 1.5])  # checked before anything is committed
    assert r.stats().open_reads == 1
