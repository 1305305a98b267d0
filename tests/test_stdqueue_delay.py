"""``journaled.Queue.put(..., delay=)``: a delayed job, the one piece of item metadata the
stdlib-shaped queue offers (its ``get`` returns objects, not items)."""

from __future__ import annotations

import time

import pytest

import journaled


def test_delayed_put_is_not_returned_before_its_time_and_later_items_pass_it(qdir) -> None:
    q: journaled.Queue[str] = journaled.Queue(qdir)
    try:
        t0 = time.time()
        q.put("later", delay=0.5)
        q.put("now")
        assert q.qsize() == 2  # both are in the queue; one is not due
        assert q.get(timeout=5) == "now"
        q.task_done()
        assert q.get(timeout=10) == "later"
        assert time.time() - t0 >= 0.5 - 0.001  # counted from the put's add time, in whole ms
        q.task_done()
    finally:
        q.close()


def test_the_delay_survives_a_restart(qdir) -> None:
    q: journaled.Queue[str] = journaled.Queue(qdir)
    due = time.time() + 0.6
    q.put("job", delay=0.6)
    q.close()
    q2: journaled.Queue[str] = journaled.Queue(qdir)
    try:
        assert q2.get(timeout=10) == "job"
        assert time.time() >= due - 0.001  # stored with ms precision
        q2.task_done()
    finally:
        q2.close()


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf")])
def test_a_bad_delay_raises_and_puts_nothing(qdir, bad: float) -> None:
    q: journaled.Queue[str] = journaled.Queue(qdir)
    try:
        with pytest.raises(ValueError):
            q.put("x", delay=bad)
        assert q.qsize() == 0 and q.journal.stats().put == 0
    finally:
        q.close()
