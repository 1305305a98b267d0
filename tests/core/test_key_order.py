"""Per-key order for competing consumers (``ReaderConfig(key_order=True)``, issue 39 point 1;
docs/design.md, "Key order"): at most one item of a key open at a time, a key's items in id order,
a busy key never holding back other keys or items without a key; an abort keeps the key's later
items behind the retried one; a reject, a dead letter or an expiry frees the key; a delayed item
holds its key until it is due; a crash keeps the order; the lines behind busy keys are charged to
``max_memory``.  On a fake clock (retry.CLOCK, read when a queue opens), compiled and pure alike.
"""

from __future__ import annotations

import itertools
import math
import os
import shutil
import threading

import pytest

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, stats
from journaled.core import retry
from journaled.owner import putpath
from support.clock import FakeClock

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)
ORDERED = ReaderConfig(key_order=True)


@pytest.fixture
def clock(monkeypatch):
    c = FakeClock()
    c.wall = float(math.ceil(c.wall))  # whole seconds: not-before times stay whole milliseconds
    monkeypatch.setattr(retry, "CLOCK", c)  # the cores of queues opened from now on run on it
    # and their puts: a put's delay counts from its add time, which must be on the same clock
    # (on the real one, a put made late in the fake clock's whole second was not yet due)
    monkeypatch.setattr(putpath, "CLOCK", c)
    monkeypatch.setattr(stats, "time", c)
    return c


@pytest.fixture
def q(qdir, clock):
    with JournaledQueue(qdir, FAST) as queue:
        yield queue


def ready(r) -> list:
    """Every item deliverable now, left open (get with block=False until Empty)."""
    out = []
    while True:
        try:
            out.append(r.get(block=False))
        except Empty:
            return out


def ids(items) -> list[int]:
    return [it.id for it in items]


# ----------------------------------------------------------------------------- the rule
def test_an_item_whose_key_is_open_waits_while_other_keys_are_delivered(q):
    r = q.reader("r", ORDERED)
    a1, a2, b1, x, b2, a3 = q.put_many(
        [b"a1", b"a2", b"b1", b"x", b"b2", b"a3"], keys=[b"a", b"a", b"b", None, b"b", b"a"]
    )
    assert ids(ready(r)) == [a1, b1, x]  # a2, b2, a3 wait behind a1 and b1
    assert r.core.keys.count == 3


def test_items_of_one_key_are_delivered_in_id_order_one_at_a_time(q):
    r = q.reader("r", ORDERED)
    put = q.put_many([b"%d" % i for i in range(6)], keys=[b"k"] * 6)
    seen = []
    for _ in range(6):
        batch = ready(r)
        assert len(batch) == 1, f"{len(batch)} items of one key open at once"
        seen.append(batch[0].id)
        r.commit(batch[0])
    assert seen == put


def test_items_without_a_key_are_never_held_back(q):
    r = q.reader("r", ORDERED)
    q.put_many([b"k"] * 50, keys=[b"busy"] * 50)
    plain = [q.put(b"p%d" % i) for i in range(5)]
    first = r.get(block=False)
    assert first.key == b"busy"
    assert ids(ready(r)) == plain  # the 49 other items of the busy key never stood in the way


def test_get_many_returns_at_most_one_item_per_key(q):
    r = q.reader("r", ORDERED)
    put = q.put_many([b"x"] * 9, keys=[b"a", b"b", b"c"] * 3)
    batch = r.get_many(9, block=False)
    assert ids(batch) == put[:3]
    assert len({it.key for it in batch}) == 3


def test_a_blocked_get_is_served_when_the_key_is_freed(q):
    r = q.reader("r", ORDERED)
    first, second = q.put_many([b"1", b"2"], keys=[b"k", b"k"])
    held = r.get(block=False)
    got = []
    t = threading.Thread(target=lambda: got.append(r.get(timeout=30)))
    t.start()
    while not r.core.waiters:  # the other consumer is blocked: nothing is deliverable
        threading.Event().wait(0.001)
    r.commit(held)
    t.join(30)
    assert ids(got) == [second]


# ----------------------------------------------------------------------------- a read that ends
def test_abort_keeps_later_items_of_the_key_behind_the_retried_one(q):
    r = q.reader("r", ORDERED)
    k1, k2 = q.put_many([b"1", b"2"], keys=[b"k", b"k"])
    r.abort(r.get(block=False))
    again = ready(r)
    assert ids(again) == [k1] and again[0].error_count == 1
    r.commit(again[0])
    assert ids(ready(r)) == [k2]


def test_abort_with_a_delay_keeps_later_items_of_the_key_behind_until_it_is_retried(q, clock):
    r = q.reader("r", ORDERED)
    k1, k2 = q.put_many([b"1", b"2"], keys=[b"k", b"k"])
    other = q.put(b"o", key=b"other")
    r.abort(r.get(block=False), delay=5)
    assert ids(ready(r)) == [other]  # k2 waits behind the delayed k1
    clock.advance(5.01)
    retried = ready(r)
    assert ids(retried) == [k1]
    r.commit(retried[0])
    assert ids(ready(r)) == [k2]


def test_release_keeps_the_key_order(q):
    r = q.reader("r", ORDERED)
    k1, k2 = q.put_many([b"1", b"2"], keys=[b"k", b"k"])
    r.release(r.get(block=False))
    assert ids(ready(r)) == [k1]


def test_a_reject_frees_the_key(q):
    r = q.reader("r", ORDERED)
    k1, k2 = q.put_many([b"1", b"2"], keys=[b"k", b"k"])
    r.reject(r.get(block=False), reason="bad")
    assert ids(ready(r)) == [k2]


def test_a_dead_letter_frees_the_key_before_its_sink_has_the_item(qdir, clock):
    sunk = []
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(key_order=True, max_errors=1, dead_letter=sunk.append))
        k1, k2 = q.put_many([b"1", b"2"], keys=[b"k", b"k"])
        r.abort(r.get(block=False))  # the first abort reaches max_errors=1
        assert ids(ready(r)) == [k2]
        q.run_policies()
        assert [d.id for d in sunk] == [k1]


def test_an_expiry_frees_the_key(q, clock):
    r = q.reader("r", ORDERED)
    k1 = q.put(b"1", key=b"k")
    k2 = q.put(b"2", key=b"k", ttl=1)
    k3 = q.put(b"3", key=b"k")
    first = r.get(block=False)
    assert ready(r) == [] and r.core.keys.count == 2
    clock.advance(2)  # k2 expires while it waits behind k1
    r.commit(first)
    assert ids(ready(r)) == [k3]
    assert r.core.expired == 1 and k1 < k2 < k3


def test_a_delayed_item_holds_back_the_later_items_of_its_key_until_it_is_due(q, clock):
    r = q.reader("r", ORDERED)
    k1 = q.put(b"1", key=b"k", delay=10)
    k2 = q.put(b"2", key=b"k")
    other = q.put(b"3", key=b"j")
    assert ids(ready(r)) == [other]  # k2 would overtake k1, which is not due
    clock.advance(10.01)
    due = ready(r)
    assert ids(due) == [k1]
    r.commit(due[0])
    assert ids(ready(r)) == [k2]


# ----------------------------------------------------------------------------- live, durable
def test_key_order_is_stored_and_changed_live_like_the_other_settings(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        q.put_many([b"1", b"2", b"3"], keys=[b"k", b"k", None])
        first = r.get(block=False)
        assert q.set_reader_settings("r", {"key_order": True})["key_order"] is True
        assert ids(ready(r)) == [3]  # item 2 waits behind item 1, opened before the switch
        r.commit(first)
        assert ids(ready(r)) == [2]
    with JournaledQueue(qdir, FAST) as q:
        assert q.reader("r").config.key_order is True  # the next owner applies it
        assert q.set_reader_settings("r", {"key_order": False}) == q.reader_settings("r")
        assert "key_order" not in q.reader_settings("r")  # off: stored as before it existed


def test_switching_key_order_off_gives_the_waiting_items_back_in_id_order(q):
    r = q.reader("r", ORDERED)
    put = q.put_many([b"x"] * 4, keys=[b"k"] * 4)
    r.get(block=False)
    assert ready(r) == []
    q.set_reader_settings("r", {"key_order": False})
    assert ids(ready(r)) == put[1:]


def test_after_a_crash_open_reads_come_back_and_are_delivered_again_in_id_order(qdir, clock):
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ORDERED)
        put = q.put_many([b"x"] * 3, keys=[b"k", b"j", b"k"])
        open_now = ready(r)
        assert ids(open_now) == put[:2]
        q.checkpoint()
        snap = qdir + ".crash"  # the directory as a crash leaves it, with two reads open
        shutil.copytree(qdir, snap, ignore=shutil.ignore_patterns(".journaled.lock", ".journaled.sock"))
    shutil.rmtree(qdir)
    os.rename(snap, qdir)
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r")
        again = ready(r)
        assert ids(again) == put[:2]  # the third waits behind the first, open again
        r.commit(again[0])
        assert ids(ready(r)) == [put[2]]


@pytest.mark.parametrize("mem", [1, 1 << 20])  # 1: every item lined up is spilled
@pytest.mark.parametrize("how", ["abort", "delay", "release"])
@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_reads_open_when_key_order_is_switched_on_all_come_back_once_given_back(qdir, clock, order, how, mem):
    # found by tests/core/test_key_order_spill_model.py: switched on with three reads of one key
    # open, an item given back behind an earlier one went to its line with no read of the key
    # open any more, and nothing woke the key: two items never delivered again
    with JournaledQueue(qdir, FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=mem))
        q.put_many([b"1", b"2", b"3"], keys=[b"a"] * 3)
        items = ready(r)
        q.set_reader_settings("r", {"key_order": True})
        first, settled, last = (items[i] for i in order)
        give_back = {
            "abort": r.abort,
            "delay": lambda it: r.abort(it, delay=5.0),
            "release": r.release,
        }[how]
        give_back(first)
        r.commit(settled)
        give_back(last)
        clock.advance(3600)
        again = []
        while batch := ready(r):
            assert len(batch) == 1, "two items of one key open at once"
            again.append(batch[0].id)
            r.commit(batch[0])
        assert again == sorted([first.id, last.id])


# ----------------------------------------------------------------------------- memory
def test_items_behind_a_busy_key_count_against_max_memory_and_none_is_lost_or_repeated(q):
    r = q.reader("r", ReaderConfig(key_order=True, max_memory=20_000))  # ~80 items of 50 bytes
    n = 2000
    keys = [b"busy" if i % 2 == 0 else b"k%d" % i for i in range(n)]
    put = q.put_many([b"%050d" % i for i in range(n)], keys=keys)
    seen: list[int] = []
    busy = r.get(block=False)
    seen.append(busy.id)
    most_charged = 0
    while True:
        batch = ready(r)
        most_charged = max(most_charged, r.core.charged())
        if not batch:
            if busy is None:
                break
            r.commit(busy)  # the busy key's next item may go out now
            busy = None
            continue
        for it in batch:
            seen.append(it.id)
            if it.key == b"busy" and busy is None:
                busy = it
            else:
                r.commit(it)
    assert sorted(seen) == put, "an item was lost or delivered twice"
    busy_order = [i for i in seen if keys[i - put[0]] == b"busy"]
    assert busy_order == sorted(busy_order)
    assert most_charged <= 20_000 + 300, f"charged {most_charged} bytes, past max_memory"


def test_the_items_waiting_behind_busy_keys_and_the_oldest_wait_are_exposed(q, clock):
    r = q.reader("r", ORDERED)
    q.put_many([b"x"] * 3, keys=[b"k"] * 3)
    r.get(block=False)
    assert ready(r) == []
    clock.advance(4)
    keys = r.core.keys
    assert keys.count == 2 and keys.nbytes == 2
    assert keys.oldest_wait(clock.monotonic()) == pytest.approx(4)


def test_journaled_config_switches_key_order_and_shows_it(qdir):
    import subprocess
    import sys

    def config(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "journaled", "config", qdir, *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    with JournaledQueue(qdir, FAST) as q:
        q.reader("r")
    done = config("reader", "r", "--key-order", "yes")
    assert done.returncode == 0, done.stderr
    assert "key_order: true" in done.stdout
    shown = config()
    assert "key_order: true" in shown.stdout, shown.stdout
    with JournaledQueue(qdir, FAST) as q:
        assert q.reader("r").config.key_order is True
    assert config("reader", "r", "--key-order", "no").returncode == 0
    with JournaledQueue(qdir, FAST) as q:
        assert q.reader("r").config.key_order is False
    assert config("reader", "r", "--key-order", "maybe").returncode != 0
