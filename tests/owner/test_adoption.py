"""The spool: out-of-process delivery into a queue, adopted exactly once (even under kill -9)."""

from __future__ import annotations

import os
import signal

import pytest

import journaled
from journaled.config import QueueConfig
from journaled.disk.bookmarks import read_bookmark, read_bookmarks, remove_bookmark, write_bookmark
from journaled.errors import CorruptJournal, InvalidName
from journaled.offline.scan import JournalScanner
from journaled.owner import adoption


def payloads_in(qdir: str) -> list[bytes]:
    return [r.payload for r in JournalScanner(qdir).records()]


def ids_in(qdir: str) -> list[int]:
    return [r.id for r in JournalScanner(qdir).records()]


def test_spooled_batch_is_adopted_when_the_queue_opens(qdir):
    assert adoption.spool_put(qdir, [b"a", b"b"], key="k1")
    assert adoption.spool_put(qdir, [b"c"], key="k2")
    with journaled.JournaledQueue(qdir) as q:
        r = q.reader("r", journaled.ReaderConfig(start="earliest"))
        got = [r.get(timeout=1).data for _ in range(3)]
    assert got == [b"a", b"b", b"c"]
    assert adoption.pending_batches(qdir) == []


def test_owner_adopts_batches_spooled_while_it_runs(qdir):
    with journaled.JournaledQueue(qdir) as q:
        q.put(b"first")
        r = q.reader("r", journaled.ReaderConfig(start="earliest"))
        adoption.spool_put(qdir, [b"x", b"y"], key="batch-1")
        got = [r.get(timeout=10).data for _ in range(3)]  # the background thread adopts
    assert got == [b"first", b"x", b"y"]


def test_resent_batch_is_dropped_across_restarts(qdir):
    adoption.spool_put(qdir, [b"once"], key="same")
    with journaled.JournaledQueue(qdir) as q:
        assert q.adopt_spool() == 0  # already adopted on open
    assert adoption.spool_put(qdir, [b"once"], key="same") is False  # the ledger says adopted
    # a producer that skipped the check (or raced with adoption) still gets deduplicated
    tmp = adoption.new_temp_path(qdir)
    w = adoption.BatchWriter(tmp, "same")
    w.add(b"once")
    w.finish()
    adoption.publish(tmp, qdir)
    with journaled.JournaledQueue(qdir) as q:
        pass
    assert payloads_in(qdir) == [b"once"]
    assert adoption.pending_batches(qdir) == []


def test_two_batches_with_one_key_in_the_spool_adopt_only_the_first(qdir):
    for payload in (b"v1", b"v2"):
        tmp = adoption.new_temp_path(qdir)
        w = adoption.BatchWriter(tmp, "dup")
        w.add(payload)
        w.finish()
        adoption.publish(tmp, qdir)
    with journaled.JournaledQueue(qdir):
        pass
    assert payloads_in(qdir) == [b"v1"]


def test_corrupt_batch_is_rejected_not_delivered(qdir):
    adoption.spool_put(qdir, [b"good"], key="g")
    adoption.spool_put(qdir, [b"bad-payload"], key="b")
    bad = adoption.pending_batches(qdir)[1]
    raw = bytearray(open(bad, "rb").read())
    raw[-20] ^= 0xFF
    open(bad, "wb").write(raw)
    with pytest.raises(CorruptJournal):
        adoption.read_batch(bad)
    with journaled.JournaledQueue(qdir):
        pass
    assert payloads_in(qdir) == [b"good"]
    assert os.listdir(os.path.join(adoption.spool_dir(qdir), adoption.REJECTED)) == [os.path.basename(bad)]


def test_batch_with_an_item_larger_than_the_queue_allows_is_rejected_whole(qdir):
    adoption.spool_put(qdir, [b"ok", b"x" * 100], key="big")
    with journaled.JournaledQueue(qdir, QueueConfig(max_item_size=50)):
        pass
    assert payloads_in(qdir) == []


def test_spool_put_rejects_non_bytes_and_writes_nothing(qdir):
    with pytest.raises(TypeError):
        adoption.spool_put(qdir, [b"a", "text"], key="k")  # type: ignore[list-item]
    assert adoption.pending_batches(qdir) == []
    assert [n for n in os.listdir(adoption.spool_dir(qdir)) if n.endswith(".tmp")] == []


def test_expiry_travels_with_a_spooled_batch(qdir):
    adoption.spool_put(qdir, [b"e"], key="k", expire_at=4_000_000_000.0)
    with journaled.JournaledQueue(qdir):
        pass
    (rec,) = JournalScanner(qdir).records()
    assert rec.expire_ms == 4_000_000_000_000


def test_torn_last_ledger_line_is_ignored(qdir):
    adoption.spool_put(qdir, [b"a"], key="k")
    with journaled.JournaledQueue(qdir):
        pass
    ledger = os.path.join(adoption.spool_dir(qdir), adoption.LEDGER)
    with open(ledger, "ab") as f:
        f.write(b"D 6b")  # half a line: a crash during the append
    assert adoption.Ledger(adoption.spool_dir(qdir)).adopted_keys() == {"k"}


def test_bookmarks_round_trip_and_hold_back_archiving(qdir):
    write_bookmark(qdir, "spark", 5)
    assert read_bookmark(qdir, "spark") == 5
    assert read_bookmarks(qdir) == {"spark": 5}
    with pytest.raises(InvalidName):
        write_bookmark(qdir, "../escape", 1)
    cfg = QueueConfig(journal_size=200, checkpoint_interval=0.05)
    with journaled.JournaledQueue(qdir, cfg) as q:
        r = q.reader("r")
        q.put_many([b"x" * 50 for _ in range(20)])
        for _ in range(20):
            r.commit(r.get(timeout=1).id)
        q.checkpoint()
        q.archive()
        assert ids_in(qdir)[0] <= 5  # the bookmark keeps id 5 on disk
        write_bookmark(qdir, "spark", 21)
        q.archive()
        assert ids_in(qdir)[0] > 5  # files wholly below the lowest head are archived
    assert remove_bookmark(qdir, "spark") and not remove_bookmark(qdir, "spark")


def test_damaged_bookmark_keeps_everything(qdir):
    write_bookmark(qdir, "b", 10)
    path = os.path.join(qdir, "external", "b")
    open(path, "ab").write(b"junk")
    assert read_bookmark(qdir, "b") == 0


def run_child_until_killed(qdir: str, step: str, sync: str) -> int:
    """Fork a child that opens the queue (adopting the spool) and dies by SIGKILL at ``step``."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child never returns normally
        try:
            adoption._crash_at = step
            cfg = QueueConfig(sync=float(sync) if sync[0].isdigit() else sync)  # type: ignore[arg-type]
            q = journaled.JournaledQueue(qdir, cfg)
            q.put(b"owner-put")
            q.close()
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


STEPS = ["after-read", "after-intent", "after-append", "after-sync", "after-done", "after-unlink"]


@pytest.mark.parametrize("sync", ["never", "0.05", "always"])
@pytest.mark.parametrize("step", [f"{s}#{k}" for s in STEPS for k in (1, 2)])
def test_kill_9_during_adoption_loses_no_batch_and_adopts_none_twice(tmp_path, step, sync):
    qdir = str(tmp_path / "q")
    batches = {f"b{k}": [f"b{k}-{i}".encode() for i in range(k + 2)] for k in range(3)}
    for key, recs in batches.items():
        adoption.spool_put(qdir, recs, key=key)
    assert run_child_until_killed(qdir, step, sync) == -signal.SIGKILL
    with journaled.JournaledQueue(qdir):  # recovery + adoption of what is left
        pass
    for key, recs in batches.items():  # re-sending after the crash changes nothing
        adoption.spool_put(qdir, recs, key=key)
    with journaled.JournaledQueue(qdir):
        pass
    got = [p for p in payloads_in(qdir) if p != b"owner-put"]
    assert got == [p for recs in batches.values() for p in recs]
    ids = ids_in(qdir)
    assert ids == list(range(ids[0], ids[0] + len(ids)))
    assert adoption.pending_batches(qdir) == []
