"""A reader's counters live in its checkpoint, so they outlive the process that owns the queue:
exact across a clean close and a change of owner; after a kill -9 the counters of settled items
roll back with the head (so work done again is counted once), ``put`` stays exact (it comes from
the journal's ids) and ``delivered`` may lose what followed the last checkpoint."""

from __future__ import annotations

import json

from journaled import JournaledQueue, QueueConfig, ReaderConfig
from tests.support.child import Child

FAST = QueueConfig(checkpoint_interval=3600.0)  # checkpoints only when a test asks


def counters(q: JournaledQueue, name: str = "r") -> dict[str, int]:
    st = q.reader(name).stats()
    fields = ("put", "delivered", "committed", "aborted", "timed_out", "expired", "discarded")
    out = {f: getattr(st, f) for f in fields}
    out.update(dead_lettered=st.dead_lettered, rejected=st.rejected)
    return out


def test_counters_continue_across_a_clean_reopen(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r", ReaderConfig(max_errors=2))
        q.put_many([b"%d" % i for i in range(10)])
        for _ in range(4):
            r.commit(r.get(block=False))
        bad = r.get(block=False)
        r.abort(bad)
        r.abort(r.get(block=False))  # its second failure: dead-lettered (dropped: no sink)
        r.reject(r.get(block=False), "unwanted")
        before = counters(q)
    assert before == {
        "put": 10,
        "delivered": 7,
        "committed": 4,
        "aborted": 2,
        "timed_out": 0,
        "expired": 0,
        "discarded": 0,
        "dead_lettered": 1,
        "rejected": 1,
    }
    with JournaledQueue(path, FAST) as q:
        assert counters(q) == before
        q.put(b"more")
        r = q.reader("r")
        r.commit(r.get(block=False))
        after = counters(q)
    assert after["put"] == 11 and after["committed"] == 5 and after["delivered"] == 8


def test_a_seek_keeps_the_counters(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r")
        q.put_many([b"a", b"b", b"c"])
        r.commit(r.get(block=False))
        r.seek("earliest")
        assert counters(q)["committed"] == 1 and counters(q)["put"] == 3


def test_a_new_reader_counts_only_the_puts_after_it_was_created(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, FAST) as q:
        q.put_many([b"a", b"b"])
        q.reader("late", ReaderConfig(start="earliest"))
        q.put(b"c")
    with JournaledQueue(path, FAST) as q:
        q.put(b"d")
        assert q.reader("late").stats().put == 2


OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(checkpoint_interval=3600.0))
r = q.reader("r")
q.put_many([b"%d" % i for i in range(20)])
for _ in range(5):
    r.commit(r.get(block=False))
q.checkpoint()
for _ in range(3):
    r.commit(r.get(block=False))
r.get(block=False)  # an open read at the kill
q.sync()
print("ready", flush=True)
sys.stdin.readline()
"""


def test_after_a_kill_the_settled_counts_roll_back_with_the_head(tmp_path) -> None:
    path = str(tmp_path / "q")
    child = Child(OWNER, path)
    try:
        child.wait_for_line("ready")
        child.kill()
    finally:
        child.stop()
    with JournaledQueue(path, FAST) as q:
        r = q.reader("r")
        got = counters(q)
        # the checkpoint recorded five commits; the three after it are undone with the head
        assert r.stats().head == 6 and got["committed"] == 5 and got["delivered"] == 5
        assert got["put"] == 20  # from the journal's ids, whatever was checkpointed
        while r.stats().items_waiting:
            r.commit(r.get(block=False))
        done = counters(q)
    assert done["committed"] == 20 and done["delivered"] == 20 and done["put"] == 20


CLIENT_WORK = """
import json, sys
from journaled import JournaledQueue
q = JournaledQueue(sys.argv[1])
r = q.reader("r")
for _ in range(3):
    r.commit(r.get(timeout=30))
r.abort(r.get(timeout=30))
print("worked", flush=True)
sys.stdin.readline()  # the owner closes meanwhile: the next call takes the queue over
st = r.stats()
print("stats", json.dumps([st.put, st.delivered, st.committed, st.aborted]), flush=True)
print("owner", q.stats().clients == (), flush=True)
q.close()
"""


def test_counters_move_with_the_ownership(tmp_path) -> None:
    """The owner closes; the client process that takes the queue over reports the same counters."""
    path = str(tmp_path / "q")
    owner = JournaledQueue(path, FAST)
    r = owner.reader("r")
    owner.put_many([b"%d" % i for i in range(10)])
    r.commit(r.get(block=False))
    client = Child(CLIENT_WORK, path)
    try:
        client.wait_for_line("worked")
        before = counters(owner)
        owner.close()
        client.send("")
        lines = client.finish()
    finally:
        client.stop()
    assert (before["committed"], before["aborted"], before["delivered"]) == (4, 1, 5)
    (stats,) = [ln.split(" ", 1)[1] for ln in lines if ln.startswith("stats ")]
    assert json.loads(stats) == [before["put"], before["delivered"], before["committed"], before["aborted"]]
    with JournaledQueue(path, FAST) as q:
        assert counters(q) == before
