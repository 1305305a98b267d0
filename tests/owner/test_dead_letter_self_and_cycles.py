"""A dead-letter destination that is the queue itself, or a cycle A -> B -> A, works after a
reopen exactly as before it (docs/design.md, "Durable settings": a queue this process owns, or
the queue itself, is used as it is).  It used to be lost at reopen: the destination was still
opening, so it was taken for another owner's (QueueLocked), ``max_errors`` was suspended for good
(poison items retried forever) and health was not ok."""

from __future__ import annotations

import threading
import time
import warnings

import pytest

from journaled import DeadLetter, Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.deadletter import MAGIC as DL_MAGIC
from journaled.owner import engine

QUIET = QueueConfig(checkpoint_interval=3600.0)


def _reopen(path: str) -> JournaledQueue:
    """Open ``path``; any warning (a suspended policy says one) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return JournaledQueue(path, QUIET)


def _poison_goes_to(q: JournaledQueue, reader: str, dest: JournaledQueue) -> None:
    """An item aborted once by ``reader`` (max_errors=1) arrives in ``dest`` as a dead letter and
    is not delivered again."""
    r = q.reader(reader)
    _drain(r)  # dead letters put here before (a cycle, or the queue itself) are not the point
    pid = q.put(b"poison")
    r.abort(r.get(timeout=5))
    q.run_policies()
    again = [it.id for it in _drain(r, every=True) if it.id == pid]
    assert again == [], "dead-lettered, not retried forever"
    letters = [DeadLetter.decode(it.data) for it in _drain(dest.reader("check"))]
    assert [(d.data, d.kind) for d in letters] == [(b"poison", "max_errors")]


def _drain(reader, every=False):  # type: ignore[no-untyped-def]
    """The dead letters ``reader`` can get now (every item with ``every``), all committed."""
    out = []
    while True:
        try:
            item = reader.get(block=False)
        except Empty:
            return out
        if every or item.data.startswith(DL_MAGIC):
            out.append(item)
        reader.commit(item)


def test_the_queue_itself_as_dead_letter_destination_survives_reopen(tmp_path) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QUIET) as q:
        q.reader("w", ReaderConfig(max_errors=1, dead_letter=q))
        q.reader("check")
    with _reopen(path) as q:
        r = q.reader("w")
        assert r.config.max_errors == 1, "max_errors was suspended at reopen"
        assert r.config.dead_letter is q
        assert q.stats().health.ok
        assert all(s.sinks_missing == () for s in q.stats().readers)
        _poison_goes_to(q, "w", q)


def test_a_dead_letter_cycle_survives_reopen_from_either_end(tmp_path) -> None:
    a_path, b_path = str(tmp_path / "a"), str(tmp_path / "b")
    a, b = JournaledQueue(a_path, QUIET), JournaledQueue(b_path, QUIET)
    a.reader("w", ReaderConfig(max_errors=1, dead_letter=b))
    b.reader("w", ReaderConfig(max_errors=1, dead_letter=a))
    a.reader("check")
    b.reader("check")
    a.close()
    b.close()
    for first, second in ((a_path, b_path), (b_path, a_path)):
        with _reopen(first) as q1:
            r1 = q1.reader("w")
            q2 = r1.config.dead_letter
            assert isinstance(q2, JournaledQueue) and q2.path == second
            r2 = q2.reader("w")
            assert (r1.config.max_errors, r2.config.max_errors) == (1, 1), "max_errors suspended"
            assert r2.config.dead_letter is q1
            assert q1.stats().health.ok and q2.stats().health.ok
            _poison_goes_to(q1, "w", q2)
            _poison_goes_to(q2, "w", q1)
        assert q2.closed  # opened by q1, closed with it


@pytest.mark.parametrize("lowered", ["before the reopen", "after the reopen"])
def test_a_lowered_max_errors_dead_letters_an_item_that_reached_it(tmp_path, lowered) -> None:
    path = str(tmp_path / "q")
    with JournaledQueue(path, QUIET) as q:
        r = q.reader("w", ReaderConfig(max_errors=5, dead_letter=q))
        q.reader("check")
        flaky = q.put(b"flaky")
        for _ in range(2):
            r.abort(r.get(timeout=5))
        if lowered == "before the reopen":
            q.set_reader_settings("w", {"max_errors": 2})
    with _reopen(path) as q:
        r = q.reader("w")
        if lowered == "after the reopen":
            q.set_reader_settings("w", {"max_errors": 2})
        assert r.config.max_errors == 2
        # its error count, 2, has reached max_errors=2: dead-lettered, not delivered (its dead
        # letter, a new item of this very queue, may be)
        got = [it.id for it in _drain(r, every=True)]
        assert flaky not in got, f"item {flaky} delivered, not dead-lettered"
        q.run_policies()  # hands it to the sink now, if the sink thread has not yet
        letters = [DeadLetter.decode(it.data) for it in _drain(q.reader("check"))]
        assert [(d.data, d.error_count, d.kind) for d in letters] == [(b"flaky", 2, "max_errors")]


def test_a_destination_still_opening_gets_no_item_before_it_is_open(tmp_path, monkeypatch) -> None:
    """B is opened while A opens (A's dead letters go to B, B's to A): B's sink thread may hand
    its parked items over before A has finished opening, but A adopts its spool first and
    nothing else may append before that (owner/adoption.py).  The item is kept and handed
    over once A is open."""
    a_path, b_path = str(tmp_path / "a"), str(tmp_path / "b")
    a, b = JournaledQueue(a_path, QUIET), JournaledQueue(b_path, QUIET)
    a.reader("w", ReaderConfig(max_errors=1, dead_letter=b))
    a.reader("check")
    b.reader("w", ReaderConfig(expire_to=a, max_age=3600.0))  # max_age: the sweep runs at once
    b.put(b"short-lived", ttl=0.2)  # expires while A reopens: B's sink thread hands it to A
    b.close()
    a_end = a.journal.next_id
    a.close()
    time.sleep(0.25)
    tried = threading.Event()
    real_disposals = engine.run_disposals

    def noting(lock, cores, closing, told=None):  # type: ignore[no-untyped-def]
        if any(c.disposing for c in cores):
            tried.set()
        return real_disposals(lock, cores, closing, told)

    real_adopt = JournaledQueue._adopt_spool
    appended_before_adoption: list[int] = []

    def adopt_late(self):  # type: ignore[no-untyped-def]
        if self.path == a_path:
            tried.wait(5)  # B's sink thread has had its go at A
            appended_before_adoption.append(self.journal.next_id - a_end)
        return real_adopt(self)

    monkeypatch.setattr(engine, "run_disposals", noting)
    monkeypatch.setattr(JournaledQueue, "_adopt_spool", adopt_late)
    with _reopen(a_path) as qa:
        assert tried.is_set(), "B's sink thread never had an item for A"
        assert appended_before_adoption == [0], "B put into A before A adopted its spool"
        qb = qa.reader("w").config.dead_letter
        assert isinstance(qb, JournaledQueue)
        qb.run_policies()
        letters = [DeadLetter.decode(it.data) for it in _drain(qa.reader("check"))]
        assert [(d.data, d.kind) for d in letters] == [(b"short-lived", "expired")]
