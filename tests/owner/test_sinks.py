"""Expiry and dead-letter sinks are user callbacks the owner's sink thread calls: they cannot
stall the engine, may close the queue, and may put into the very queue they serve (an item
parked for such a sink at close is kept, not dropped)."""

from __future__ import annotations

import threading
import time

import pytest

from journaled import DeadLetter, Empty, JournaledQueue, QueueConfig, ReaderConfig
from journaled.offline.scan import JournalScanner

QUIET = QueueConfig(checkpoint_interval=3600.0)


def test_dead_letter_into_the_same_queue_survives_close(qdir):
    """docs/design.md: "a sink may put into the same queue", and the sink sees every item at
    least once.  Items still parked for such a sink at close() used to be dropped: the sink's
    put raised QueueClosed and the item was committed anyway."""
    import time

    cfg = QueueConfig(sync="never", checkpoint_interval=3600.0)
    q = JournaledQueue(qdir, cfg)

    class SinkReachedOnlyWhileClosing:
        """Puts into ``q`` once ``q.close()`` has begun: the hand-off meets a closing queue."""

        def put(self, data: bytes) -> int:
            deadline = time.monotonic() + 30
            while not q.closed and time.monotonic() < deadline:
                time.sleep(0.001)
            return q.put(data)

    r = q.reader("r", ReaderConfig(max_errors=1, dead_letter=SinkReachedOnlyWhileClosing()))
    q.put(b"poison")
    r.abort(r.get(block=False))  # parked for the dead-letter sink (this very queue)
    q.close()
    with JournaledQueue(qdir, cfg) as q2:
        r2 = q2.reader("r", ReaderConfig(max_errors=1, dead_letter=q2))
        with pytest.raises(Empty):
            r2.get(block=False)  # still poison: goes to the sink, not to the consumer
        q2.run_policies()
        assert DeadLetter.decode(r2.get(block=False).data).data == b"poison"  # the sink's copy, put here


def _journal_bytes(qdir: str) -> int:
    scanner = JournalScanner(qdir)
    return sum(len(rec.payload) for rec in scanner.records())


def test_a_slow_sink_does_not_delay_the_periodic_flush(qdir):
    release = threading.Event()
    reached = threading.Event()

    def slow_sink(item: object) -> None:
        reached.set()
        release.wait(20)

    q = JournaledQueue(qdir, QueueConfig(sync=0.05, checkpoint_interval=3600.0))
    try:
        q.reader("r", ReaderConfig(expire_to=slow_sink))
        q.put(b"short-lived", ttl=0.001)
        assert reached.wait(10), "the expired item never reached its sink"
        q.put(b"y" * 1000)  # made while the sink is busy
        deadline = time.monotonic() + 2.0
        while _journal_bytes(qdir) < len(b"short-lived") + 1000 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _journal_bytes(qdir) == len(b"short-lived") + 1000, (
            "the put was not flushed while the sink ran"
        )
    finally:
        release.set()
        q.close()


def test_a_sink_may_close_the_queue(qdir):
    q = JournaledQueue(qdir, QUIET)
    closed_by_sink = threading.Event()

    def closing_sink(item: object) -> None:
        q.close()
        closed_by_sink.set()

    q.reader("r", ReaderConfig(expire_to=closing_sink))
    q.put(b"x", ttl=0.001)
    assert closed_by_sink.wait(10), "close() called from a sink never returned"
    done = threading.Event()
    t = threading.Thread(target=lambda: (q.close(), done.set()), daemon=True)
    t.start()
    assert done.wait(10), "a later close() hangs"
    with JournaledQueue(qdir, QUIET) as again:  # the directory was released
        assert again.readers() == ["r"]
