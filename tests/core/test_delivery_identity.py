"""A read is identified by its delivery, not by the item id.

When a read's ``open_read_timeout`` takes the item away and hands it to another consumer, the
first consumer's late commit or abort raises ``UnknownRead`` and cannot settle the new delivery;
nobody else gets the item while the new delivery is open.
"""

from __future__ import annotations

import time

import pytest

from journaled import Empty, JournaledQueue, QueueConfig, ReaderConfig, UnknownRead

QUIET = QueueConfig(checkpoint_interval=3600.0)


def test_late_commit_after_open_read_timeout_raises_and_cannot_settle_the_new_delivery(qdir):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=1.0))
        q.put(b"job")
        first = r.get(block=False)  # consumer A
        time.sleep(1.1)
        q.run_policies()  # A's read is taken away (the background tick does the same)
        second = r.get(block=False)  # consumer B gets the item again
        assert (second.id, second.error_count) == (first.id, 1)
        with pytest.raises(UnknownRead):
            r.commit(first)  # A, late
        with pytest.raises(Empty):
            r.get(block=False)  # B's read is still open: nobody else gets the item
        r.commit(second)  # and B can finish it
        assert r.stats().committed == 1 and r.stats().open_reads == 0


def test_late_abort_after_open_read_timeout_is_unknown_read_and_no_third_consumer_gets_it(qdir):
    with JournaledQueue(qdir, QUIET) as q:
        r = q.reader("r", ReaderConfig(open_read_timeout=1.0))
        q.put(b"job")
        first = r.get(block=False)
        time.sleep(1.1)
        q.run_policies()
        second = r.get(block=False)
        with pytest.raises(UnknownRead):
            r.abort(first)
        with pytest.raises(Empty):
            r.get(block=False)  # would have been a third delivery while B holds it
        assert r.stats().open_reads == 1
        r.commit(second)
