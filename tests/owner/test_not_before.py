"""Not before, on real queues and real clocks: an item put with a ``not_before`` (or ``delay``) is
never delivered before it, does not hold back the items after it, wakes a blocked ``get`` when it
becomes due, and keeps its time across a close, a kill -9 and read-behind, since the time is in
its record (issue 25, point 2).  Delays are short; "not before" is asserted on the item's own
time, never on how long a test slept.
"""

from __future__ import annotations

import threading
import time

import pytest

from journaled import Empty, Full, Item, JournaledQueue, QueueConfig, ReaderConfig
from tests.support.child import Child

FAST = QueueConfig(sync="never", checkpoint_interval=3600.0)
SHORT = 0.3  # seconds: a delay the tests wait out
LONG = 3600.0  # seconds: a delay no test waits out
DEADLINE = 60.0


def wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.005)


def check_due(item: Item) -> Item:
    """``item``, after checking it was delivered no earlier than its not_before."""
    assert item.not_before is None or time.time() >= item.not_before, (item.id, item.not_before)
    return item


def ready(r) -> list[bytes]:
    """Deliver and commit what is deliverable now (each checked), the payloads in order."""
    out = []
    while True:
        try:
            item = check_due(r.get(block=False))
        except Empty:
            return out
        out.append(item.data)
        r.commit(item)


def test_item_is_not_delivered_before_its_not_before(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"far", delay=LONG)
        q.put(b"soon", not_before=time.time() + SHORT)
        assert r.stats().items_not_due >= 1
        got = []
        wait_for(lambda: got.extend(ready(r)) or got, "the item's time")
        assert got == [b"soon"]
        assert ready(r) == [] and r.stats().items_not_due == 1


def test_later_items_are_not_held_back_behind_an_item_not_yet_due(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        q.put(b"first")
        q.put_many([b"x", b"y"], delay=LONG)
        q.put_many([b"a", b"b"])
        assert ready(r) == [b"first", b"a", b"b"]
        st = r.stats()
        assert (st.items_waiting, st.items_not_due, st.head) == (2, 2, 2)


@pytest.mark.parametrize("timeout", [None, DEADLINE], ids=["no timeout", "timeout"])
def test_a_blocked_get_wakes_when_the_item_becomes_due(tmp_path, timeout) -> None:
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r")
        got: list[Item] = []
        getter = threading.Thread(target=lambda: got.append(check_due(r.get(timeout=timeout))))
        getter.start()
        wait_for(lambda: r.stats().waiters == 1, "the get to block")
        q.put(b"later", delay=SHORT)
        getter.join(DEADLINE)
        assert not getter.is_alive() and [it.data for it in got] == [b"later"]


def test_the_not_before_survives_close_and_reopen(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r")
        q.put(b"far", delay=LONG)
        q.put(b"soon", delay=SHORT * 2)
        q.put(b"now")
        assert ready(r) == [b"now"]
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r")
        assert r.stats().head == 1  # the checkpoint's head did not pass the parked item
        got: list[bytes] = []
        wait_for(lambda: got.extend(ready(r)) or got, "the item's time")
        assert got == [b"soon"] and ready(r) == []
        assert r.stats().items_not_due == 1 and r.stats().backlog_items == 1


OWNER = """
import sys, time
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(checkpoint_interval=3600.0))
r = q.reader("r")
q.put(b"far", delay=3600)
q.put(b"soon", delay=%r)
q.put_many([b"a", b"b"])
for _ in range(2):
    r.commit(r.get(block=False))
q.checkpoint()
q.sync()
print("ready", flush=True)
sys.stdin.readline()
"""


def test_the_not_before_survives_a_kill_9_of_the_owner(tmp_path) -> None:
    path = str(tmp_path / "q")
    child = Child(OWNER % (SHORT * 2), path)
    try:
        child.wait_for_line("ready")
        child.kill()
    finally:
        child.stop()
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r")
        st = r.stats()
        assert (st.head, st.backlog_items) == (1, 2)  # a and b were committed past the held ones
        got: list[bytes] = []
        wait_for(lambda: got.extend(ready(r)) or got, "the item's time")
        assert got == [b"soon"] and ready(r) == []
        assert r.stats().items_not_due == 1


def test_read_behind_with_a_small_memory_budget_still_holds_the_item(tmp_path) -> None:
    filler = [b"%04d" % i + b"." * 300 for i in range(200)]
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(max_memory=8192))
        q.put_many(filler[:100])
        q.put(b"far", delay=LONG)
        q.put_many(filler[100:])
        assert r.stats().items_on_disk > 100
        assert ready(r) == filler
        assert r.stats().items_not_due == 1 and r.stats().backlog_items == 1


def test_an_item_whose_ttl_ends_before_its_not_before_is_never_delivered(tmp_path) -> None:
    expired: list[bytes] = []
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(expire_to=lambda item: expired.append(item.data)))
        q.put(b"never", delay=SHORT, ttl=SHORT / 2)
        q.put(b"after", delay=SHORT)
        wait_for(lambda: expired == [b"never"], "the expiry sink")
        got: list[bytes] = []
        wait_for(lambda: got.extend(ready(r)) or got, "the item's time")
        assert got == [b"after"] and r.stats().expired == 1


def test_stats_count_items_not_yet_due_and_max_items_counts_them(tmp_path) -> None:
    with JournaledQueue(str(tmp_path / "q"), FAST) as q:
        r = q.reader("r", ReaderConfig(max_items=3))
        q.put_many([b"x", b"y"], delay=LONG)
        q.put(b"z")
        st = r.stats()
        assert (st.items_not_due, st.items_delayed, st.items_waiting, st.backlog_items) == (2, 0, 3, 3)
        with pytest.raises(Full):
            q.put(b"one too many")
        r.commit(r.get(block=False))
        q.put(b"room again")


CLIENT_GET = """
import sys, time
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])  # the test's process owns it: this one is a client
r = q.reader("r")
print("waiting", flush=True)
item = r.get(timeout=60)
print("got", item.data.decode(), repr(time.time()), flush=True)
r.commit(item)
q.close()
"""


def test_another_process_blocked_in_get_is_given_the_item_only_once_it_is_due(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r")
        q.put(b"far", delay=LONG)
        child = Child(CLIENT_GET, path)
        try:
            child.wait_for_line("waiting")
            wait_for(lambda: r.stats().waiters == 1, "the client's get to block")
            not_before = time.time() + SHORT
            q.put(b"soon", not_before=not_before)
            lines = child.finish()
        finally:
            child.stop()
        got = [ln.split() for ln in lines if ln.startswith("got ")]
        # the record keeps milliseconds: the item's not_before is the one given, truncated
        assert [g[1] for g in got] == ["soon"] and float(got[0][2]) >= int(not_before * 1000) / 1000
        assert r.stats().items_not_due == 1 and r.stats().committed == 1
