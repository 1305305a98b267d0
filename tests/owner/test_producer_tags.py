"""The owner's side of exactly-once puts: ``put_many(..., producer=(id, first sequence))``.

A put whose sequences are already stored returns their ids and stores only the missing ones, in
memory and after a reopen or a kill -9 of the owner (the runs are rebuilt from the journal's
tail); a put cut short mid-write is completed, not duplicated."""

from __future__ import annotations

import os
import time

import pytest

from journaled import JournaledQueue, QueueConfig
from journaled.errors import Empty
from journaled.owner import putpath
from journaled.owner.dedup import MAX_RUNS, PRODUCER_WINDOW, Producers
from support.child import killed_after

PID = 0xC0FFEE


class _Clock:
    """``time_ns`` for journaled.owner.putpath, moved by hand."""

    def __init__(self) -> None:
        self.ns = time.time_ns()

    def time_ns(self) -> int:
        return self.ns

    def advance(self, seconds: float) -> None:
        self.ns += int(seconds * 1e9)


def payloads(n: int, tag: bytes = b"p") -> list[bytes]:
    return [tag + b"%d" % i for i in range(n)]


def drain(q: JournaledQueue) -> list[bytes]:
    r = q.reader("r")
    out = []
    while True:
        try:
            item = r.get(block=False)
        except Empty:
            return out
        out.append(item.data)
        r.commit(item)


def test_the_same_tag_twice_is_stored_once_with_the_same_ids(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        q.reader("r")
        ids = q.put_many(payloads(5), producer=(PID, 0))
        assert q.put_many(payloads(5), producer=(PID, 0)) == ids
        assert q.put_many(payloads(5), producer=(PID + 1, 0)) == list(range(ids[-1] + 1, ids[-1] + 6))
        assert q.stats().put == 10
        assert drain(q) == payloads(5) * 2


def test_a_retry_stores_only_the_missing_sequences(tmp_path) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        q.reader("r")
        stored = q.put_many(payloads(3), producer=(PID, 10))  # what a cut-short put left
        q.put(b"other")
        ids = q.put_many(payloads(5), producer=(PID, 10))
        assert ids[:3] == stored
        assert ids[3:] == [stored[-1] + 2, stored[-1] + 3]
        assert q.stats().put == 6
        assert drain(q) == [*payloads(3), b"other", b"p3", b"p4"]
        assert q.put_many(payloads(5), producer=(PID, 10)) == ids  # and again: nothing


def test_a_put_cut_short_by_a_torn_write_is_completed_after_reopen(tmp_path) -> None:
    path = tmp_path / "q"
    with JournaledQueue(path) as q:
        q.reader("r")
        ids = q.put_many(payloads(6), producer=(PID, 0))
        jf = q.journal.files[-1]
        file_path = jf.path
    size = os.path.getsize(file_path)
    os.truncate(file_path, size - 40)  # the last record torn: the last item lost
    with JournaledQueue(path) as q:
        assert q.stats().next_id == ids[-1]  # recovery cut the torn record
        assert q.put_many(payloads(6), producer=(PID, 0)) == ids
        assert q.stats().put == 1
        assert drain(q) == payloads(6)


def test_the_runs_survive_a_clean_reopen(tmp_path) -> None:
    path = tmp_path / "q"
    with JournaledQueue(path, QueueConfig(journal_size=4096)) as q:
        first = q.put_many([b"x" * 500] * 4, producer=(PID, 0))
        second = q.put_many([b"y" * 500] * 20, producer=(PID, 4))
        assert len(q.journal.files) > 2
    with JournaledQueue(path) as q:
        assert q.put_many([b"z"] * 24, producer=(PID, 0)) == first + second
        assert q.stats().put == 0


def test_producers_idle_longer_than_the_window_are_forgotten(tmp_path, monkeypatch) -> None:
    clock = _Clock()
    monkeypatch.setattr(putpath, "CLOCK", clock)
    path = tmp_path / "q"
    with JournaledQueue(path) as q:
        ids = q.put_many(payloads(2), producer=(PID, 0))
        clock.advance(PRODUCER_WINDOW - 1)
        assert q.put_many(payloads(2), producer=(PID, 0)) == ids
        q.put_many(payloads(1), producer=(PID + 1, 0))  # another producer's put drops the idle ones
        clock.advance(2)
        q.put_many(payloads(1), producer=(PID + 1, 1))
        assert q._put.producers.runs(PID) == []  # noqa: SLF001 (the memory bound is what is tested)
        assert len(q._put.producers) == 1  # noqa: SLF001
    clock.advance(1)
    with JournaledQueue(path) as q:  # the first tagged put reads back only the window too
        q.put_many(payloads(1), producer=(PID + 2, 0))
        assert q._put.producers.runs(PID) == []  # noqa: SLF001
        assert q._put.producers.runs(PID + 1) != []  # noqa: SLF001


def test_a_producer_keeps_at_most_max_runs() -> None:
    p = Producers()
    for i in range(MAX_RUNS + 10):
        p.add(PID, [(i, 2 * i)], 1000)  # ids not consecutive: a run each
    runs = p.runs(PID)
    assert len(runs) == MAX_RUNS and runs[0] == (10, 20, 1)
    assert p.find(PID, 0, 10) is None
    assert p.find(PID, MAX_RUNS + 9, 2) == [2 * (MAX_RUNS + 9), None]
    p.add(PID, [(MAX_RUNS + 10, 2 * (MAX_RUNS + 9) + 1)], 1000)  # continues the last run
    assert p.runs(PID)[-1] == (MAX_RUNS + 9, 2 * (MAX_RUNS + 9), 2)


@pytest.mark.parametrize("tag", [(0, 1), (1 << 64, 0), (1, -1)])
def test_a_bad_tag_stores_nothing(tmp_path, tag) -> None:
    with JournaledQueue(tmp_path / "q") as q:
        with pytest.raises(ValueError):
            q.put_many([b"a"], producer=tag)
        assert q.stats().put == 0


OWNER = """
import sys
from journaled import JournaledQueue, QueueConfig
q = JournaledQueue(sys.argv[1], QueueConfig(sync="never"))
q.put(b"before")
ids = q.put_many([b"p%d" % i for i in range(50)], producer=(0xC0FFEE, 7))
print("ids", ids[0], ids[-1], flush=True)
sys.stdin.readline()  # killed here
"""


def test_after_a_kill_of_the_owner_a_retry_with_the_same_tag_stores_nothing(tmp_path) -> None:
    path = str(tmp_path / "q")
    first, last = (int(v) for v in killed_after(OWNER, "ids", path))
    with JournaledQueue(path) as q:
        q.reader("r")
        assert q.put_many(payloads(50), producer=(PID, 7)) == list(range(first, last + 1))
        assert q.put_many(payloads(52), producer=(PID, 7))[50:] == [last + 1, last + 2]
        assert q.stats().put == 2
        assert drain(q) == [b"before", *payloads(52)]
