"""A dead-letter or expiry destination that is closed while its source queue stays open is a
stopped sink, not a broken one: the item it refused stays with the reader (uncommitted) and
reaches the destination later -- after a reopen at the latest -- instead of being dropped."""

from __future__ import annotations

import logging
import time

import pytest

from journaled import DeadLetter, JournaledQueue, QueueConfig, ReaderConfig

DEADLINE = 30.0


def test_an_item_rejected_into_a_closed_destination_is_kept_not_dropped(tmp_path, caplog) -> None:
    dpath, qpath = str(tmp_path / "dead"), str(tmp_path / "q")
    with JournaledQueue(dpath) as dead:
        q = JournaledQueue(qpath, QueueConfig(checkpoint_interval=0.05))
        w = q.reader("w", ReaderConfig(max_errors=1, dead_letter=dead))
    # ``dead`` is closed now; the source queue is still open
    q.put(b"job", key=b"order-7")
    w.reject(w.get(timeout=5), reason="bad")
    with caplog.at_level(logging.WARNING, logger="journaled"):
        deadline = time.monotonic() + DEADLINE
        while "refused item 1" not in caplog.text:
            assert time.monotonic() < deadline, "the refusal was never logged"
            time.sleep(0.01)
        time.sleep(0.3)  # several more passes of the sink thread
    assert caplog.text.count("refused item 1") == 1  # said once, not once per pass
    assert "item dropped" not in caplog.text
    assert w.stats().head == 1  # not committed: the checkpoint keeps it
    q.close()
    # as after any stop with an item bound for a sink: the reader has it again (a reject is a
    # decision in memory; the consumer makes it again), so nothing is lost
    with JournaledQueue(dpath) as dead, JournaledQueue(qpath) as q2:
        w2 = q2.reader("w", ReaderConfig(max_errors=1, dead_letter=dead))
        again = w2.get(timeout=5)
        assert (again.id, again.data, again.key) == (1, b"job", b"order-7")
        w2.reject(again, reason="bad")
        q2.run_policies()
        letter = DeadLetter.decode(dead.reader("ops", ReaderConfig(start="earliest")).get(timeout=5).data)
    assert (letter.data, letter.reason, letter.key) == (b"job", "bad", b"order-7")


def test_items_a_closed_dead_letter_queue_refused_are_handed_over_at_reopen_and_counted_once(
    tmp_path,
) -> None:
    # They come back uncommitted with their error counts: the reopened reader's sweep hands them
    # over without waiting for a consumer's get, and its lasting counter counts each once (the
    # checkpoint never counted what its head and done did not reflect)
    dpath, qpath = str(tmp_path / "dead"), str(tmp_path / "q")
    dead = JournaledQueue(dpath)
    q = JournaledQueue(qpath)
    w = q.reader("w", ReaderConfig(max_errors=1, dead_letter=dead))
    q.put_many([b"j%d" % i for i in range(5)])
    for _ in range(5):
        w.abort(w.get(timeout=5))  # each reaches max_errors
    dead.close()  # before the source: its sink thread may not have handed them all yet
    q.close()
    with JournaledQueue(qpath) as q2:  # opens ../dead itself (the stored setting)
        w2 = q2.reader("w")
        deadline = time.monotonic() + DEADLINE
        while w2.stats().backlog_items:
            assert time.monotonic() < deadline, w2.stats()
            q2.run_policies()
            time.sleep(0.05)
        assert w2.stats().dead_lettered == 5
    with JournaledQueue(dpath) as d:
        letters = d.reader("all", ReaderConfig(start="earliest"))
        assert sorted(DeadLetter.decode(letters.get(timeout=5).data).data for _ in range(5)) == [
            b"j%d" % i for i in range(5)
        ]
        assert len(letters) == 0


def test_a_sink_raising_another_error_still_drops_its_item(tmp_path, caplog) -> None:
    def broken(_letter: DeadLetter) -> None:
        raise RuntimeError("no")

    with JournaledQueue(str(tmp_path / "q")) as q:
        w = q.reader("w", ReaderConfig(dead_letter=broken))
        q.put(b"x")
        w.reject(w.get(timeout=5))
        with caplog.at_level(logging.ERROR, logger="journaled"):
            q.run_policies()
            deadline = time.monotonic() + DEADLINE
            while w.stats().head != 2:
                assert time.monotonic() < deadline
                time.sleep(0.01)
    assert "item dropped" in caplog.text


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
